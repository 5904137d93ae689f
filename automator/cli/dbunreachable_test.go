//go:build linux

package cli

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/waittest"
)

// cutOffStore is a store whose reads of a unit find the database out of
// reach while cut is set, as a replica cut off from PostgreSQL does.
type cutOffStore struct {
	store.Store
	cut *atomic.Bool
}

func (s cutOffStore) WorkGet(ctx context.Context, id string) (store.Work, error) {
	if s.cut.Load() {
		return store.Work{}, fmt.Errorf("reading work %s: %w", id, store.ErrUnavailable)
	}
	return s.Store.WorkGet(ctx, id)
}

// TestWorkWaitOnAnAutomatorWithoutItsDatabaseSaysSoAtOnce: an automator
// whose database does not answer answers the calls that need it
// UNAVAILABLE, and the client tries again for its budget. work wait (and
// exec) says so in one line on stderr as soon as every address has
// answered so, with the automator's answer, what it does and until when,
// as for an automator it cannot reach; before, it said nothing until the
// unit's end or its minute of retries (a review: 60 to 70 s of silence).
// The database back, the wait ends as the unit did.
func TestWorkWaitOnAnAutomatorWithoutItsDatabaseSaysSoAtOnce(t *testing.T) {
	t.Parallel()
	var cut atomic.Bool
	a := automatortest.Start(t, automatortest.Options{WrapStore: func(s store.Store) store.Store { return cutOffStore{s, &cut} }})
	c, err := client.New(client.Config{Addresses: []string{a.URL()}, APIKey: a.APIKey, CAPEM: a.CAPEM})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err := c.Submit(t.Context(), a.Account, client.Command{Script: "x.sh"}, client.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	cut.Store(true)
	r := start(t.Context(), "work", "wait", w.ID, "--server", a.URL(), "--api-key-file", a.APIKeyFile, "--ca", a.CAFile)
	line := r.notice(t, "work wait")
	for _, want := range []string{"the automator at " + a.URL() + " cannot serve the call now: the automator's database is unreachable", "waiting for work " + w.ID + ": trying again for"} {
		if !strings.Contains(line, want) {
			t.Errorf("stderr's first line %q does not say %q", line, want)
		}
	}
	cut.Store(false)
	if code := waittest.Recv(t, r.done, "work wait to end"); code != ExitNotAllSucceeded {
		t.Errorf("work wait: exit %d; want %d (the unit timed out, no proxy): %s", code, ExitNotAllSucceeded, r.errText())
	}
}

// TestAClientGivingUpOnAutomatorsWithoutTheirDatabaseSaysSo: a call that
// every automator answered UNAVAILABLE for want of its database gives up
// at the end of its budget saying that none could serve it, not that none
// answered (they did; a review).
func TestAClientGivingUpOnAutomatorsWithoutTheirDatabaseSaysSo(t *testing.T) {
	t.Parallel()
	var cut atomic.Bool
	a := automatortest.Start(t, automatortest.Options{WrapStore: func(s store.Store) store.Store { return cutOffStore{s, &cut} }})
	c, err := client.New(client.Config{Addresses: []string{a.URL()}, APIKey: a.APIKey, CAPEM: a.CAPEM, RetryFor: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err := c.Submit(t.Context(), a.Account, client.Command{Script: "x.sh"})
	if err != nil {
		t.Fatal(err)
	}
	cut.Store(true)
	_, err = c.Get(t.Context(), w.ID)
	if err == nil || !strings.Contains(err.Error(), "no automator could serve it, its database unreachable; giving up") {
		t.Errorf("Get with the database cut off: %v; want it to say no automator could serve it", err)
	}
}
