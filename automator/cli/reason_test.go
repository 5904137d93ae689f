//go:build linux

package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/automator/store"
)

// reasonCell is the REASON cell (the last) of the table row of unit id
// in out, and whether out has a line under the table saying reasons
// were cut and what gives them whole (whole, as the command words it).
func reasonCell(t *testing.T, out, id, whole string) (cell string, noted bool) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "WORK ID") {
		t.Fatalf("table %q: want a header and rows", out)
	}
	at := strings.Index(lines[0], "REASON")
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, id+" ") {
			if len(l) < at {
				t.Fatalf("row %q has no reason", l)
			}
			cell = l[at:]
		}
		noted = noted || (strings.HasPrefix(l, "reasons ending in … were cut to fit") && strings.Contains(l, whole))
	}
	if cell == "" {
		t.Fatalf("no row of %s in %q", id, out)
	}
	return cell, noted
}

// checkTableReason checks the REASON cell of a unit no instance claimed,
// none of whose instances was online: it says so, and names the instance
// that polled last and what it did, in at most maxReason runes; and the
// line under the table says reasons were cut and how to see them whole.
func checkTableReason(t *testing.T, out, id, latest, whole string) {
	t.Helper()
	cell, noted := reasonCell(t, out, id, whole)
	want := "unclaimed: no instance was online (" + latest
	if !strings.HasPrefix(cell, want) || utf8.RuneCountInString(cell) > maxReason || !strings.HasSuffix(cell, "…") {
		t.Errorf("REASON of %s = %q (%d runes); want it to begin %q, cut to at most %d runes", id, cell, utf8.RuneCountInString(cell), want, maxReason)
	}
	if !noted {
		t.Errorf("no line under the table says reasons were cut and that %s gives them whole:\n%s", whole, out)
	}
}

// TestWorkListShowsWhyNoInstanceClaimedAUnit: the REASON column of a unit
// that timed out unclaimed leaves out the words every such reason shares
// and the account (its own column), so it shows the instances: the one
// that polled last, and what it did.
func TestWorkListShowsWhyNoInstanceClaimedAUnit(t *testing.T) {
	dir := seedListings(t)
	ctx := t.Context()
	st, _ := openDirStore(t, dir)
	if _, err := st.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: "w_10", Account: "acme", KeyID: 1, Now: listNow.Add(-time.Minute),
		Deadline: listNow.Add(-time.Second), SealedCommand: []byte("sealed")}); err != nil {
		t.Fatal(err)
	}
	// None of acme's instances polled since listNow: none was online.
	ws, err := st.WorkExpire(ctx, store.WorkExpireParams{Now: listNow, OnlineSince: listNow})
	if err != nil || len(ws) != 1 {
		t.Fatalf("WorkExpire: %v, %v", ws, err)
	}
	st.Close()
	whole := ws[0].Reason

	out := listCLI(t, "work", "list", "--data-dir", dir)
	checkTableReason(t, out, "w_10", "host-b last polled at 2026-01-02T03:14:03Z; ", "`automator work show ID`")
	// The claimer's name is in its own column too.
	if cell, _ := reasonCell(t, out, "w_04", ""); cell != "claimed at 2026-01-02T03:04:08.688Z, no result before the deadline" {
		t.Errorf("REASON of a claimed unit that timed out = %q", cell)
	}

	var got []workView
	if err := json.Unmarshal([]byte(listCLI(t, "work", "list", "--json", "--data-dir", dir)), &got); err != nil {
		t.Fatal(err)
	}
	for _, v := range got {
		if v.ID == "w_10" && v.Reason != whole {
			t.Errorf("--json gives w_10 the reason %q; want it whole, %q", v.Reason, whole)
		}
	}

	// Nothing cut, no line.
	out = listCLI(t, "work", "list", "--state", "cancelled", "--data-dir", dir)
	if strings.Contains(out, "were cut") {
		t.Errorf("a table with no reason cut says some were:\n%s", out)
	}
}

// unclaimedTimeout starts an automator whose account has two instances,
// neither online (p1 stopped, p2 last polled an hour ago), and returns a
// unit of it that timed out unclaimed, and the remote caller's flags.
func unclaimedTimeout(t *testing.T) (w client.Work, stopped time.Time, remote []string) {
	t.Helper()
	a := automatortest.Start(t, automatortest.Options{})
	ctx := context.Background()
	stopped = time.Now().Truncate(time.Second)
	for _, in := range []store.InstanceSeenParams{
		{Account: a.Account, InstanceID: "p1", Hostname: "p1", Version: "v1", Stopping: true, Now: stopped},
		{Account: a.Account, InstanceID: "p2", Hostname: "p2", Version: "v1", Now: stopped.Add(-time.Hour)},
	} {
		if err := a.Store.InstanceSeen(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(client.Config{Addresses: []string{a.URL()}, APIKey: a.APIKey, CAPEM: a.CAPEM})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	queued, err := c.Submit(ctx, a.Account, client.Command{Script: "x.sh"}, client.WithTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if w, err = c.Wait(ctx, queued.ID); w.State != client.StateTimedOut || !strings.HasPrefix(w.Reason, store.UnclaimedReason) {
		t.Fatalf("unit: %s, %q, %v; want it timed out unclaimed", w.State, w.Reason, err)
	}
	return w, stopped, []string{"--server", a.URL(), "--api-key-file", a.APIKeyFile, "--ca", a.CAFile}
}

// TestWorkWaitShowsWhyNoInstanceClaimedAUnit: as work list, work wait's
// table shows the instances of a unit no instance claimed; --json gives
// the reason whole.
func TestWorkWaitShowsWhyNoInstanceClaimedAUnit(t *testing.T) {
	t.Parallel()
	w, stopped, remote := unclaimedTimeout(t)
	code, out, errOut := runCLI(t, append([]string{"work", "wait", w.ID}, remote...)...)
	if code != ExitNotAllSucceeded {
		t.Fatalf("work wait: exit %d, stderr %q", code, errOut)
	}
	checkTableReason(t, out, w.ID, "p1 stopped at "+stopped.UTC().Format(time.RFC3339)+"; ", "--json")

	wantWholeReasonInJSON(t, w.ID, w.Reason, remote)
}

// TestWorkCancelShowsWhyNoInstanceClaimedAUnit: as work list, work
// cancel's table shows the instances of a unit no instance claimed, which
// had timed out before the cancel.
func TestWorkCancelShowsWhyNoInstanceClaimedAUnit(t *testing.T) {
	t.Parallel()
	w, stopped, remote := unclaimedTimeout(t)
	r := runCancel(t, append([]string{w.ID}, remote...)...)
	if r.code != 0 {
		t.Fatalf("work cancel: exit %d, stderr %q", r.code, r.stderr)
	}
	checkTableReason(t, r.stdout, w.ID, "p1 stopped at "+stopped.UTC().Format(time.RFC3339)+"; ", "`automator work wait ID... --json`")
}

// TestWorkWaitShowsTheAdviceForAnAccountWithNoInstance: the REASON cell
// of a unit that timed out unclaimed because its account has no proxy
// instance at all keeps the reason's advice, to start one with the
// account's profile, whole within maxReason runes; --json gives the
// reason whole. Before, the cell was cut before the advice.
func TestWorkWaitShowsTheAdviceForAnAccountWithNoInstance(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	ctx := context.Background()
	c, err := client.New(client.Config{Addresses: []string{a.URL()}, APIKey: a.APIKey, CAPEM: a.CAPEM})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	queued, err := c.Submit(ctx, a.Account, client.Command{Script: "x.sh"}, client.WithTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Wait(ctx, queued.ID)
	if w.State != client.StateTimedOut || !strings.Contains(w.Reason, "has no proxy instance") {
		t.Fatalf("unit: %s, %q, %v; want it timed out unclaimed, the account having no instance", w.State, w.Reason, err)
	}
	remote := []string{"--server", a.URL(), "--api-key-file", a.APIKeyFile, "--ca", a.CAFile}
	code, out, errOut := runCLI(t, append([]string{"work", "wait", w.ID}, remote...)...)
	if code != ExitNotAllSucceeded {
		t.Fatalf("work wait: exit %d, stderr %q", code, errOut)
	}
	cell, noted := reasonCell(t, out, w.ID, "--json")
	const advice = "start one with the account's profile"
	if !strings.HasPrefix(cell, "unclaimed: ") || !strings.HasSuffix(cell, advice) || utf8.RuneCountInString(cell) > maxReason || noted {
		t.Errorf("REASON of %s = %q (%d runes), a line noting a cut: %v; want it to begin %q and end with the advice %q, in at most %d runes, uncut",
			w.ID, cell, utf8.RuneCountInString(cell), noted, "unclaimed: ", advice, maxReason)
	}
	wantWholeReasonInJSON(t, w.ID, w.Reason, remote)
}

// TestATableShowsTheFixForInstancesRefusedForWantOfAKey: the reason of a
// unit unclaimed while instances of its account polled and were refused
// for want of a usable key, or for an expired account token, names them
// first, with the cause and the fix; a table says
// that in short, so that the fix shows within maxReason runes, with the
// store's own words (store.ExpireReasons).
func TestATableShowsTheFixForInstancesRefusedForWantOfAKey(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 16, 0, 0, 0, time.UTC)
	refused := func(id string) store.Instance {
		return store.Instance{Account: "acme", InstanceID: id, LastPollAt: at, RefusedKeyIDs: []uint32{1}}
	}
	expired := func(id string) store.Instance {
		return store.Instance{Account: "acme", InstanceID: id, LastPollAt: at, RefusedTokenExpired: true}
	}
	polled := store.Instance{Account: "acme", InstanceID: "b", LastPollAt: at.Add(-time.Hour)}
	for _, c := range []struct {
		name string
		in   store.AccountInstances
		want string
	}{
		{"one refused, none online", store.AccountInstances{Instances: 2, Refused: 1, Latest: []store.Instance{refused("a"), polled}},
			"unclaimed: no instance was online (a: no usable key, install the latest profile"},
		{"two refused, one online", store.AccountInstances{Instances: 3, Online: 1, Refused: 2, Latest: []store.Instance{refused("a"), refused("c"), polled}},
			"unclaimed (1 instance online; a, c: no usable key, install the latest profile)"},
		{"one refused for its expired token, none online", store.AccountInstances{Instances: 2, Refused: 1, Latest: []store.Instance{expired("a"), polled}},
			"unclaimed: no instance was online (a: token expired, install the latest profile"},
		{"two refused for their expired token, one online", store.AccountInstances{Instances: 3, Online: 1, Refused: 2, Latest: []store.Instance{expired("a"), expired("c"), polled}},
			"unclaimed (1 instance online; a, c: token expired, install the latest profile)"},
	} {
		reason := store.ExpireReasons(map[string]store.AccountInstances{"acme": c.in})(store.Work{Account: "acme", State: store.StateQueued})
		shown, _ := tableReason(reason, "acme", "")
		if !strings.HasPrefix(shown, c.want) || utf8.RuneCountInString(shown) > maxReason {
			t.Errorf("%s: the reason %q is shown %q; want it to begin %q, in at most %d runes", c.name, reason, shown, c.want, maxReason)
		}
	}
}

// wantWholeReasonInJSON checks that `work wait ID --json` gives the unit's
// reason whole, as the table does not.
func wantWholeReasonInJSON(t *testing.T, id, reason string, remote []string) {
	t.Helper()
	_, out, _ := runCLI(t, append([]string{"work", "wait", id, "--json"}, remote...)...)
	var got []waitJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != 1 || got[0].Reason != reason {
		t.Errorf("work wait --json = %s (%v); want the reason whole, %q", out, err, reason)
	}
}

// TestATableReasonIsCutOnlyPastItsWidth: a reason of maxReason runes
// (characters, not bytes) fits its cell whole; one rune more, and it is
// cut to maxReason runes, the last "…", and said to be cut.
func TestATableReasonIsCutOnlyPastItsWidth(t *testing.T) {
	t.Parallel()
	fits := strings.Repeat("é", maxReason)
	if got, cut := tableReason(fits, "acme", ""); got != fits || cut {
		t.Errorf("a reason of %d runes: %q (cut %v), want it whole", maxReason, got, cut)
	}
	got, cut := tableReason(fits+"x", "acme", "")
	if want := strings.Repeat("é", maxReason-1) + "…"; got != want || !cut {
		t.Errorf("a reason of %d runes: %q (cut %v), want %q, cut", maxReason+1, got, cut, want)
	}
}
