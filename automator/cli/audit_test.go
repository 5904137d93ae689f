package cli

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// auditDetails runs `automator audit` with args on dir and returns the
// details of the events it lists, in its order.
func auditDetails(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	code, out, stderr := runMain(t, append([]string{"audit", "--data-dir", dir, "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("audit %q: exit %d: %s", args, code, stderr)
	}
	var details []string
	for line := range strings.Lines(out) {
		var e auditJSON
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("audit %q: line %q: %v", args, line, err)
		}
		details = append(details, e.Detail)
	}
	return details
}

// TestAuditListsTheEventsOfAnAccountAUnitOrSomeKinds: `automator audit
// --account`, `--work` and `--kind` keep the events that match, all of
// them. A unit's events are found whether it is still stored (by when it
// was queued, also for an id of the first releases, made at random) or
// purged (by the time its id holds, or, when that finds nothing, the whole
// log), an event of another clock stamped before it was queued included; a
// kind's family stands for its kinds.
func TestAuditListsTheEventsOfAnAccountAUnitOrSomeKinds(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	ctx := t.Context()
	st, _ := openDirStore(t, dir)
	now := time.Now()
	queued := now.Add(-90 * 24 * time.Hour)
	stored := store.NewWorkID(queued)                    // still in the work table
	purged := store.NewWorkID(queued.Add(time.Minute))   // removed by the purge: never stored here
	random := "w_ffffffffffff" + strings.Repeat("0", 20) // an id of the first releases: its "time" is ages ahead
	randomPurged := "w_fffffffffffe" + strings.Repeat("0", 20)
	// A purged unit of the first releases whose random id reads as ten
	// days ago, months after the unit was queued.
	randomRecent := store.NewWorkID(now.Add(-10 * 24 * time.Hour))
	for _, u := range []struct {
		id string
		at time.Time
	}{{stored, queued}, {random, queued.Add(2 * time.Minute)}} {
		if _, err := st.AccountCreate(ctx, store.AccountCreateParams{Name: "acct-" + u.id, TokenHash: []byte(u.id), KeyID: 1, SealedKey: []byte("k"), Now: u.at}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: u.id, Account: "acct-" + u.id, KeyID: 1, Now: u.at, Deadline: u.at.Add(5 * time.Minute), SealedCommand: []byte("sealed")}); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range []store.AuditEvent{
		{At: queued.Add(-time.Hour), Kind: store.AuditWorkEnded, Account: "acme", WorkID: stored, Detail: "stored, by a clock an hour slow"},
		{At: queued, Kind: store.AuditWorkQueued, Account: "acme", WorkID: stored, Detail: "stored queued"},
		{At: queued.Add(time.Minute), Kind: store.AuditWorkQueued, Account: "acme", WorkID: purged, Detail: "purged queued"},
		{At: queued.Add(time.Minute - time.Hour), Kind: store.AuditWorkEnded, Account: "acme", WorkID: purged, Detail: "purged, by a clock an hour slow"},
		{At: queued.Add(2 * time.Minute), Kind: store.AuditWorkQueued, Account: "globex", WorkID: random, Detail: "random queued"},
		{At: queued.Add(3 * time.Minute), Kind: store.AuditAuthFailed, Detail: "a wrong token"},
		{At: queued.Add(4 * time.Minute), Kind: store.AuditWorkEnded, Account: "initech", WorkID: randomPurged, Detail: "random purged ended"},
		{At: queued.Add(5 * time.Minute), Kind: store.AuditWorkEnded, Account: "initech", WorkID: randomRecent, Detail: "random recent ended"},
		{At: now.Add(-time.Hour), Kind: store.AuditAuthDenied, Account: "acme", Detail: "acme denied"},
		{At: now.Add(-time.Minute), Kind: store.AuditWorkEnded, Account: "globex", WorkID: random, Detail: "random ended"},
		{At: now.Add(-time.Second), Kind: store.AuditWorkEnded, Account: "acme", WorkID: stored, Detail: "stored ended"},
	} {
		if _, err := st.AuditAppend(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()

	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--work", stored}, []string{"stored, by a clock an hour slow", "stored queued", "stored ended"}},
		{[]string{"--work", purged}, []string{"purged queued", "purged, by a clock an hour slow"}},
		{[]string{"--work", random}, []string{"random queued", "random ended"}},
		{[]string{"--work", randomPurged}, []string{"random purged ended"}},
		{[]string{"--work", randomRecent}, []string{"random recent ended"}},
		{[]string{"--work", stored, "--since", "1h"}, []string{"stored ended"}},
		{[]string{"--account", "acme"}, []string{"stored, by a clock an hour slow", "stored queued", "purged queued", "purged, by a clock an hour slow", "acme denied", "stored ended"}},
		{[]string{"--account", "acme", "--kind", "auth"}, []string{"acme denied"}},
		{[]string{"--account", "globex", "--kind", "work.ended, work.queued"}, []string{"random queued", "random ended"}},
		{[]string{"--kind", "auth.failed,auth.denied", "--since", "24h"}, []string{"acme denied"}},
		{[]string{"--kind", "auth.failed,auth.denied"}, []string{"a wrong token", "acme denied"}},
		{[]string{"--account", "acme", "--work", random}, nil},
		// Nothing listed, exit 0: an account that exists, and one only
		// the log knows (deleted since).
		{[]string{"--account", "acct-" + stored, "--kind", "auth"}, nil},
		{[]string{"--account", "initech", "--kind", "auth"}, nil},
	} {
		if got := auditDetails(t, dir, c.args...); !slices.Equal(got, c.want) {
			t.Errorf("audit %q listed %q; want %q", c.args, got, c.want)
		}
	}
}

// TestAuditRefusesFiltersItCannotUse: an unknown kind, a malformed work id
// or an empty filter (a script's variable left empty, which would list
// everything) is one line naming the flag, and what it accepts.
func TestAuditRefusesFiltersItCannotUse(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--kind", "work.done"}, `--kind "work.done" is not a kind of audit event; the kinds are work.queued, work.duplicate, work.ended, work.refused, auth.failed,`},
		{[]string{"--kind", "work,"}, `--kind "" is not a kind of audit event`},
		{[]string{"--work", "w_123"}, `--work "w_123" is not a work id (w_ and 32 hexadecimal digits)`},
		{[]string{"--account", "Acme"}, `--account "Acme" is not an account name: it must match`},
		{[]string{"--work", ""}, "--work is empty; leave it out to list the events of every unit"},
		{[]string{"--account", ""}, "--account is empty; leave it out to list the events of every account"},
		{[]string{"--kind", ""}, "--kind is empty"},
		// A name that is no account's, and never was (a typo).
		{[]string{"--account", "acmee"}, `--account: there is no account "acmee", now or in the audit log; ` + "`automator account list --data-dir " + dir + "` lists them"},
	} {
		code, out, stderr := runMain(t, append([]string{"audit", "--data-dir", dir}, c.args...)...)
		if code != ExitError || out != "" || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("audit %q: exit %d, stdout %q, stderr %q; want exit %d and one line holding %q", c.args, code, out, stderr, ExitError, c.want)
		}
	}
}
