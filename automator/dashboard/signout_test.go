package dashboard_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
	"github.com/opsgate/opsgate/internal/waittest"
)

// sessionCookie returns the session cookie c holds for base.
func sessionCookie(t *testing.T, c *http.Client, base string) *http.Cookie {
	t.Helper()
	u, _ := url.Parse(base + "/dashboard/")
	for _, ck := range c.Jar.Cookies(u) {
		return ck
	}
	t.Fatal("no session cookie")
	return nil
}

// getWith returns the status of a GET of u with cookie ck alone.
func getWith(t *testing.T, u string, ck *http.Cookie) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.AddCookie(ck)
	resp, err := client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// signOut posts the sign-out form with c's cookie and returns the status.
func signOut(t *testing.T, c *http.Client, base string) int {
	t.Helper()
	resp, err := c.PostForm(base+"/dashboard/logout", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestSignOutEndsTheSessionOnEveryReplica: a copy of a session cookie,
// taken before its owner signed out, is refused afterwards by every
// replica sharing the database, here two dashboards each on its own store
// opened on one SQLite file; an event stream of that session open on the
// other replica gets "signedout" and ends. The record of the sign-out is
// purged only once the session has expired (an hour of margin for
// replicas' clocks).
func TestSignOutEndsTheSessionOnEveryReplica(t *testing.T) {
	e := newEnv(t)
	other, err := sqlitestore.Open(t.Context(), e.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	dashA, a := e.start(replica{})
	dashB, b := e.start(replica{st: other})

	c := client(t)
	e.signIn(c, a, "viewer")
	copied := sessionCookie(t, c, a)
	for name, base := range map[string]string{"A": a, "B": b} {
		if code := getWith(t, base+"/dashboard/", copied); code != http.StatusOK {
			t.Fatalf("the copied cookie on replica %s before sign-out: %d, want 200", name, code)
		}
	}
	// An event stream of the session, open on replica B.
	events := openStream(t, client(t), b+"/dashboard/", copied)
	if ev := waittest.Recv(t, events, "the stream's first event"); ev.name != "update" {
		t.Fatalf("the stream's first event is %q, want update", ev.name)
	}

	if code := signOut(t, c, a); code != http.StatusSeeOther {
		t.Fatalf("sign-out on replica A: %d, want 303", code)
	}
	for name, base := range map[string]string{"A": a, "B": b} {
		if code := getWith(t, base+"/dashboard/", copied); code != http.StatusSeeOther {
			t.Errorf("the copied cookie on replica %s after sign-out: %d, want 303 to the sign-in form", name, code)
		}
	}
	// The sign-in form the copy is sent to says the session was signed
	// out of, and to sign in again: not how to make a new admin key,
	// which is for a key revoked (a review).
	req, _ := http.NewRequest(http.MethodGet, b+"/dashboard/login", nil)
	req.AddCookie(copied)
	resp, err := client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	form, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(form), "Your session ended: it was signed out of. Sign in again with your API key.") || strings.Contains(string(form), "To make a new admin key") {
		t.Errorf("the sign-in form for the signed-out cookie:\n%s\nwant it saying the session was signed out of, and to sign in again", form)
	}
	// The stream on B ends with "signedout" (at its next refresh).
	if last := lastEvent(t, events); last.name != "signedout" {
		t.Errorf("the stream of the signed-out session ended with %q, want signedout", last.name)
	}

	// Signing in again makes a new session, which works.
	e.signIn(c, b, "viewer")
	if code := getWith(t, a+"/dashboard/", sessionCookie(t, c, b)); code != http.StatusOK {
		t.Errorf("a new session after the sign-out: %d, want 200", code)
	}

	// The record stays while the session could be used, and an hour
	// more; then it is purged.
	e.clock.Add(12*time.Hour + 59*time.Minute)
	if n, err := dashB.PurgeEndedSessions(t.Context()); err != nil || n != 0 {
		t.Errorf("purge 12h59m after sign-in: %d records, %v; want none (an hour of margin)", n, err)
	}
	e.clock.Add(2 * time.Minute)
	if n, err := dashA.PurgeEndedSessions(t.Context()); err != nil || n != 1 {
		t.Errorf("purge 13h01m after sign-in: %d records, %v; want the one sign-out", n, err)
	}
}

// failingSignOuts is a store whose sign-outs fail.
type failingSignOuts struct{ store.Store }

func (failingSignOuts) DashboardSessionEnd(context.Context, store.DashboardSessionEndParams) error {
	return errors.New("disk I/O error")
}

// TestSignOutThatTheStoreRefusesKeepsTheCookie: a sign-out the store could
// not record is not claimed: the visitor is told (503) that they are still
// signed in and to sign out again, and keeps the cookie to do so.
func TestSignOutThatTheStoreRefusesKeepsTheCookie(t *testing.T) {
	e := newEnv(t)
	_, base := e.start(replica{st: failingSignOuts{e.st}})
	c := client(t)
	e.signIn(c, base, "viewer")
	const told = "you are still signed in; sign out again"
	if code, body := post(t, c, base+"/dashboard/logout", nil); code != http.StatusServiceUnavailable || !strings.Contains(body, told) {
		t.Errorf("sign-out the store refused: %d\n%s\nwant 503 saying %q", code, body, told)
	}
	if code, _ := get(t, c, base+"/dashboard/"); code != http.StatusOK {
		t.Errorf("after a sign-out that failed: %d, want 200 (still signed in, told so)", code)
	}
}

// TestEventStreamEndsWhenItsSessionExpires: a stream outlives the request
// that authenticated it, so it checks its session's expiry at each refresh
// too: past the session's 12 hours it gets "signedout" and ends.
func TestEventStreamEndsWhenItsSessionExpires(t *testing.T) {
	e := newEnv(t)
	c := client(t)
	e.signIn(c, e.url, "viewer")
	events := openStream(t, c, e.url+"/dashboard/")
	if ev := waittest.Recv(t, events, "the stream's first event"); ev.name != "update" {
		t.Fatalf("the stream's first event is %q, want update", ev.name)
	}
	e.clock.Add(12 * time.Hour)
	if last := lastEvent(t, events); last.name != "signedout" {
		t.Errorf("the stream of an expired session ended with %q, want signedout", last.name)
	}
}

// lastEvent reads events until the stream ends and returns the last one;
// it fails the test if the stream is still open after 10 s.
func lastEvent(t *testing.T, events <-chan event) event {
	t.Helper()
	timeout := time.After(10 * time.Second)
	var last event
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return last
			}
			last = ev
		case <-timeout:
			t.Fatalf("the stream is still open after 10s (last event %q)", last.name)
		}
	}
}
