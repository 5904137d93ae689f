package dashboard_test

import (
	"database/sql"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/store"
)

// refuseAudit makes the env's SQLite file refuse every audit event (a
// trigger, as the audit log's own append-only ones); the returned func
// lets it take them again.
func refuseAudit(t *testing.T, e *env) (allow func()) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+e.path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TRIGGER test_refuse_audit BEFORE INSERT ON audit
BEGIN SELECT RAISE(ABORT, 'the test refuses every audit event'); END`); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if _, err := db.Exec(`DROP TRIGGER test_refuse_audit`); err != nil {
			t.Fatal(err)
		}
	}
}

// auditKinds counts the events of the audit log by kind.
func auditKinds(t *testing.T, e *env) map[string]int {
	t.Helper()
	events, err := e.st.AuditList(t.Context(), store.AuditListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, ev := range events {
		kinds[ev.Kind]++
	}
	return kinds
}

// post posts form to u with c and returns the status and body.
func post(t *testing.T, c *http.Client, u string, form url.Values) (int, string) {
	t.Helper()
	resp, err := c.PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// TestASignInWhoseAuditRecordFailsIsRefused: a sign-in is written to the
// audit log before its session is issued; when the audit log refuses the
// record, the visitor gets no session and is told why on the sign-in
// page. Once the audit log takes events again, the same key signs in, with
// one record.
func TestASignInWhoseAuditRecordFailsIsRefused(t *testing.T) {
	e := newEnv(t)
	allow := refuseAudit(t, e)
	c := client(t)
	code, body := post(t, c, e.url+"/dashboard/login", url.Values{"api_key": {e.secrets["admin"]}})
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "so you are not signed in") {
		t.Errorf("sign-in the audit log refused: %d\n%s\nwant 503 saying the visitor is not signed in", code, body)
	}
	u, _ := url.Parse(e.url + "/dashboard/")
	if cks := c.Jar.Cookies(u); len(cks) != 0 {
		t.Errorf("sign-in the audit log refused set cookies %v, want none", cks)
	}
	if code, loc := get(t, c, e.url+"/dashboard/"); code != http.StatusSeeOther || !strings.Contains(loc, "/dashboard/login") {
		t.Errorf("the dashboard after a refused sign-in: %d %q, want 303 to the sign-in form", code, loc)
	}

	allow()
	if resp := e.signIn(c, e.url, "admin"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in once the audit log takes events: %d, want 303", resp.StatusCode)
	}
	if code, _ := get(t, c, e.url+"/dashboard/"); code != http.StatusOK {
		t.Errorf("the dashboard after signing in: %d, want 200", code)
	}
	if k := auditKinds(t, e); k[store.AuditDashboardSignIn] != 1 {
		t.Errorf("the audit log holds %v, want one %s (the sign-in made)", k, store.AuditDashboardSignIn)
	}
}

// TestASignOutWhoseAuditRecordFailsKeepsTheSession: a sign-out and its
// audit record are one write. When the audit log refuses the record, the
// session is not ended: the visitor is told so, on the error page, and
// keeps a session that works. Once the audit log takes events again the
// sign-out ends the session with one record; signing out again with a copy
// of the cookie changes nothing and records nothing more.
func TestASignOutWhoseAuditRecordFailsKeepsTheSession(t *testing.T) {
	e := newEnv(t)
	c := client(t)
	e.signIn(c, e.url, "admin")
	copied := sessionCookie(t, c, e.url)

	allow := refuseAudit(t, e)
	code, body := post(t, c, e.url+"/dashboard/logout", nil)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "so you are still signed in") {
		t.Errorf("sign-out the audit log refused: %d\n%s\nwant 503 saying the visitor is still signed in", code, body)
	}
	if code := getWith(t, e.url+"/dashboard/", copied); code != http.StatusOK {
		t.Errorf("the session after a sign-out the audit log refused: %d, want 200 (not ended)", code)
	}

	allow()
	if code := signOut(t, c, e.url); code != http.StatusSeeOther {
		t.Fatalf("sign-out once the audit log takes events: %d, want 303", code)
	}
	if code := getWith(t, e.url+"/dashboard/", copied); code != http.StatusSeeOther {
		t.Errorf("the session after its sign-out: %d, want 303 to the sign-in form", code)
	}
	// Again, with the copy: the session was ended already.
	req, _ := http.NewRequest(http.MethodPost, e.url+"/dashboard/logout", nil)
	req.AddCookie(copied)
	resp, err := client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("a second sign-out of the session: %d, want 303", resp.StatusCode)
	}
	if k := auditKinds(t, e); k[store.AuditDashboardSignOut] != 1 {
		t.Errorf("the audit log holds %v, want one %s (the one sign-out that ended the session)", k, store.AuditDashboardSignOut)
	}
}
