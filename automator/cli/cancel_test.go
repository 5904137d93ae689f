//go:build linux

package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/internal/pidtest"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// unknownID has the shape of a work id, and no automator made it.
const unknownID = "w_0123456789abcdef0123456789abcdef"

type cliRun struct {
	code           int
	stdout, stderr string
}

func runCancel(t *testing.T, args ...string) cliRun {
	t.Helper()
	code, out, errb := runCLI(t, append([]string{"work", "cancel"}, args...)...)
	return cliRun{code, out, errb}
}

// cancelCLI runs `work cancel IDS... --data-dir DIR` on the automator's
// host.
func (s *served) cancelCLI(t *testing.T, extra ...string) cliRun {
	t.Helper()
	return runCancel(t, append(extra, "--data-dir", s.dir)...)
}

// remote are the flags of a caller away from the automator's host.
func (s *served) remote() []string {
	return []string{"--server", "https://" + s.grpc, "--api-key-file", filepath.Join(s.dir, config.FileAPIKey),
		"--ca", filepath.Join(s.dir, config.FileCACert)}
}

// rows are the table's lines after its header, each split in its cells
// (two spaces or more apart); the line under it saying reasons were cut
// is not one.
func rows(t *testing.T, table string) [][]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "WORK ID") {
		t.Fatalf("table %q: want a header and a row per unit", table)
	}
	var out [][]string
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, "reasons ending in …") {
			break
		}
		var cells []string
		for _, c := range strings.Split(l, "  ") {
			if c = strings.TrimSpace(c); c != "" {
				cells = append(cells, c)
			}
		}
		out = append(out, cells)
	}
	return out
}

func submit(t *testing.T, c *client.Client, script string, args ...string) client.Work {
	t.Helper()
	w, err := c.Submit(t.Context(), "acme", client.Command{Script: script, Args: args})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func get(t *testing.T, c *client.Client, id string) client.Work {
	t.Helper()
	w, err := c.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestWorkCancelKillsTheScriptRunningOnAProxy: `work cancel --data-dir`
// on the automator's host ends a claimed unit cancelled, and its proxy
// kills the script and the process it started; the row says this call
// cancelled it. Cancelling it again changes nothing and says so.
func TestWorkCancelKillsTheScriptRunningOnAProxy(t *testing.T) {
	t.Parallel()
	s := serveInProcess(t)
	if err := os.WriteFile(filepath.Join(s.scripts, "sleeper.sh"), []byte(`#!/bin/sh
sleep 600 &
echo "$! $$" > "$1.tmp" && mv "$1.tmp" "$1"
exec sleep 600
`), 0o755); err != nil {
		t.Fatal(err)
	}
	s.proxy(t, s.account(t, "acme"), "p1")
	c := s.client(t)
	pidFile := filepath.Join(t.TempDir(), "pids")
	w := submit(t, c, "sleeper.sh", pidFile)
	waittest.Until(t, "the script to start", func() bool { _, err := os.Stat(pidFile); return err == nil })
	pids := pidtest.ScriptPIDs(t, pidFile)
	if got := get(t, c, w.ID); got.State != client.StateClaimed || got.InstanceID != "p1" {
		t.Fatalf("unit running its script: %s by %q; want claimed by p1", got.State, got.InstanceID)
	}

	r := s.cancelCLI(t, w.ID)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("work cancel of a running unit: exit %d, stderr %q; want 0 and nothing", r.code, r.stderr)
	}
	want := []string{w.ID, "acme", "cancelled", "-", "p1", "cancelled it (was claimed)"}
	if got := rows(t, r.stdout); len(got) != 1 || !slices.Equal(got[0][:len(want)], want) {
		t.Fatalf("work cancel printed %q; want one row starting %q", r.stdout, want)
	}
	waittest.Until(t, "the script and its child to be killed", func() bool {
		return pidtest.Gone(pids[0]) && pidtest.Gone(pids[1])
	})
	if got := get(t, c, w.ID); got.State != client.StateCancelled || !strings.Contains(got.Reason, "cancelled by the caller") {
		t.Errorf("unit after work cancel: %s (%q); want cancelled by the caller", got.State, got.Reason)
	}

	r = s.cancelCLI(t, w.ID)
	want = []string{w.ID, "acme", "cancelled", "-", "p1", "already cancelled"}
	if got := rows(t, r.stdout); r.code != 0 || len(got) != 1 || !slices.Equal(got[0][:len(want)], want) {
		t.Errorf("work cancel again: exit %d, %q; want 0 and one row starting %q", r.code, r.stdout, want)
	}
}

// TestWorkCancelEndsAQueuedUnit: with no proxy polling, `work cancel
// --server` from afar ends a queued unit cancelled; no instance ever
// claimed it.
func TestWorkCancelEndsAQueuedUnit(t *testing.T) {
	t.Parallel()
	s := serveInProcess(t)
	s.account(t, "acme")
	c := s.client(t)
	w := submit(t, c, "anything.sh")
	if w.State != client.StateQueued {
		t.Fatalf("submitted with no proxy: %s, want queued", w.State)
	}
	r := runCancel(t, append([]string{w.ID}, s.remote()...)...)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("work cancel of a queued unit: exit %d, stderr %q; want 0 and nothing", r.code, r.stderr)
	}
	want := []string{w.ID, "acme", "cancelled", "-", "-", "cancelled it (was queued)"}
	if got := rows(t, r.stdout); len(got) != 1 || !slices.Equal(got[0][:len(want)], want) {
		t.Fatalf("work cancel printed %q; want one row starting %q", r.stdout, want)
	}
	if got := get(t, c, w.ID); got.State != client.StateCancelled || got.InstanceID != "" || !got.ClaimedAt.IsZero() {
		t.Errorf("unit after work cancel: %s, claimed by %q at %v; want cancelled and never claimed", got.State, got.InstanceID, got.ClaimedAt)
	}
}

// TestWorkCancelLeavesAnEndedUnitAsItWas: a unit that already succeeded
// is reported as it is, "already succeeded", with exit 0; its result is
// untouched, and its output is not printed.
func TestWorkCancelLeavesAnEndedUnitAsItWas(t *testing.T) {
	t.Parallel()
	s := serveInProcess(t)
	if err := os.WriteFile(filepath.Join(s.scripts, "secret.sh"), []byte("#!/bin/sh\necho the-secret-output\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s.proxy(t, s.account(t, "acme"), "p1")
	c := s.client(t)
	res, err := c.ExecuteOnProxy(t.Context(), "acme", client.Command{Script: "secret.sh"})
	if err != nil || res.ExitCode != 3 {
		t.Fatalf("running secret.sh: %+v, %v", res, err)
	}
	before := get(t, c, res.WorkID)

	r := s.cancelCLI(t, res.WorkID)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("work cancel of a unit that succeeded: exit %d, stderr %q; want 0 and nothing", r.code, r.stderr)
	}
	want := []string{res.WorkID, "acme", "succeeded", "3", "p1", "already succeeded"}
	if got := rows(t, r.stdout); len(got) != 1 || !slices.Equal(got[0][:len(want)], want) {
		t.Fatalf("work cancel printed %q; want one row starting %q", r.stdout, want)
	}
	if strings.Contains(r.stdout, "the-secret-output") {
		t.Errorf("work cancel printed the unit's output: %q", r.stdout)
	}
	after := get(t, c, res.WorkID)
	if after.State != client.StateSucceeded || !after.FinishedAt.Equal(before.FinishedAt) || after.Result == nil ||
		string(after.Result.Stdout) != "the-secret-output\n" || after.Result.ExitCode != 3 {
		t.Errorf("unit after work cancel: %+v; want it as before, %+v", after, before)
	}
}

// TestWorkCancelGoesOnPastAnUnknownID: an unknown id and a malformed one
// each get one line naming them, the unit given after them is still
// cancelled, and the exit code is 1; so does a unit of an account the API
// key may not use. A refused API key stops the command with 255 and
// cancels nothing.
func TestWorkCancelGoesOnPastAnUnknownID(t *testing.T) {
	t.Parallel()
	s := serveInProcess(t)
	s.account(t, "acme")
	c := s.client(t)
	w := submit(t, c, "anything.sh")

	r := s.cancelCLI(t, unknownID, "not-a-work-id", w.ID)
	if r.code != ExitSomeIDRefused {
		t.Errorf("work cancel of an unknown, a malformed and a queued id: exit %d, want %d", r.code, ExitSomeIDRefused)
	}
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	if len(lines) != 2 ||
		lines[0] != "automator: cancelling work "+unknownID+": there is no such unit (unknown id, deleted past work_retention, or of an account the API key may not use)" ||
		lines[1] != `automator: cancelling work "not-a-work-id": not a work id (w_ and 32 lowercase hex digits, as work list shows them)` {
		t.Errorf("stderr %q: want one line for the unknown id, then one for the malformed one", r.stderr)
	}
	want := []string{w.ID, "acme", "cancelled", "-", "-", "cancelled it (was queued)"}
	if got := rows(t, r.stdout); len(got) != 1 || !slices.Equal(got[0][:len(want)], want) {
		t.Errorf("work cancel printed %q; want one row starting %q", r.stdout, want)
	}
	if got := get(t, c, w.ID); got.State != client.StateCancelled {
		t.Errorf("the queued unit given after the bad ids: %s, want cancelled", got.State)
	}

	// A key that may use another account only: acme's unit is refused in
	// one line, as an unknown id is (the key learns nothing of acme), exit
	// 1, and the other account's unit is still cancelled.
	s.account(t, "other")
	code, secret, errOut := runCLI(t, "apikey", "create", "ops-other", "--data-dir", s.dir, "--accounts", "other")
	if code != 0 {
		t.Fatalf("apikey create: exit %d: %s", code, errOut)
	}
	scopedKey := filepath.Join(t.TempDir(), "scoped.apikey")
	if err := os.WriteFile(scopedKey, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	acmeUnit := submit(t, c, "anything.sh")
	otherUnit, err := c.Submit(t.Context(), "other", client.Command{Script: "anything.sh"})
	if err != nil {
		t.Fatal(err)
	}
	r = runCancel(t, acmeUnit.ID, otherUnit.ID, "--server", "https://"+s.grpc, "--api-key-file", scopedKey,
		"--ca", filepath.Join(s.dir, config.FileCACert))
	if r.code != ExitSomeIDRefused || strings.Count(r.stderr, "\n") != 1 ||
		r.stderr != "automator: cancelling work "+acmeUnit.ID+": there is no such unit (unknown id, deleted past work_retention, or of an account the API key may not use)\n" {
		t.Errorf("work cancel of another account's unit: exit %d, stderr %q; want %d and one line saying there is no such unit",
			r.code, r.stderr, ExitSomeIDRefused)
	}
	want = []string{otherUnit.ID, "other", "cancelled", "-", "-", "cancelled it (was queued)"}
	if got := rows(t, r.stdout); len(got) != 1 || !slices.Equal(got[0][:len(want)], want) {
		t.Errorf("work cancel with a scoped key printed %q; want one row starting %q", r.stdout, want)
	}
	if got := get(t, c, acmeUnit.ID); got.State != client.StateQueued {
		t.Errorf("acme's unit after a cancel with a key for other only: %s, want still queued", got.State)
	}

	// A key the automator refuses: one line, 255, nothing cancelled.
	other := submit(t, c, "anything.sh")
	wrongKey := filepath.Join(t.TempDir(), "wrong.apikey")
	if err := os.WriteFile(wrongKey, []byte("oak_wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = runCancel(t, other.ID, unknownID, "--server", "https://"+s.grpc, "--api-key-file", wrongKey,
		"--ca", filepath.Join(s.dir, config.FileCACert))
	if r.code != ExitError || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "Unauthenticated") {
		t.Errorf("work cancel with a wrong API key: exit %d, stdout %q, stderr %q; want %d and one line saying Unauthenticated",
			r.code, r.stdout, r.stderr, ExitError)
	}
	if got := get(t, c, other.ID); got.State != client.StateQueued {
		t.Errorf("unit after a work cancel with a wrong key: %s, want still queued", got.State)
	}
	// No id: a usage error.
	if r := s.cancelCLI(t); r.code != ExitError || !strings.Contains(r.stderr, "usage: automator work cancel ID...") {
		t.Errorf("work cancel with no id: exit %d, %q; want %d and its usage", r.code, r.stderr, ExitError)
	}
}

// TestWorkCancelJSON: --json gives an array with an object per unit, in
// the order given, shaped like work wait's (work_id, account, state,
// exit_code, instance_id, reason) with what this call did: the state it
// found (previous_state) and whether it cancelled the unit.
func TestWorkCancelJSON(t *testing.T) {
	t.Parallel()
	s := serveInProcess(t)
	if err := os.WriteFile(filepath.Join(s.scripts, "ok.sh"), []byte("#!/bin/sh\necho secret-output-of-ok\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := s.account(t, "acme")
	c := s.client(t)
	queued := submit(t, c, "ok.sh")
	r := s.cancelCLI(t, queued.ID, "--json")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("work cancel --json of a queued unit: exit %d, stderr %q", r.code, r.stderr)
	}
	var got []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("work cancel --json printed %q: %v", r.stdout, err)
	}
	reason := get(t, c, queued.ID).Reason
	if !strings.HasPrefix(reason, "cancelled by the caller") {
		t.Errorf("reason of the cancelled unit: %q, want it to name the caller", reason)
	}
	want := []map[string]any{{"work_id": queued.ID, "account": "acme", "state": "cancelled", "reason": reason,
		"previous_state": "queued", "cancelled_by_this_call": true}}
	if g, w := mustJSON(t, got), mustJSON(t, want); g != w {
		t.Errorf("work cancel --json of a queued unit = %s\nwant %s", g, w)
	}
	s.proxy(t, cfg, "p1")
	res, err := c.ExecuteOnProxy(t.Context(), "acme", client.Command{Script: "ok.sh"})
	if err != nil {
		t.Fatal(err)
	}
	r = s.cancelCLI(t, res.WorkID, "--json", queued.ID)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("work cancel --json: exit %d, stderr %q", r.code, r.stderr)
	}
	got = nil
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("work cancel --json printed %q: %v", r.stdout, err)
	}
	want = []map[string]any{
		{"work_id": res.WorkID, "account": "acme", "state": "succeeded", "exit_code": 0.0, "instance_id": "p1",
			"previous_state": "succeeded", "cancelled_by_this_call": false},
		{"work_id": queued.ID, "account": "acme", "state": "cancelled", "reason": reason,
			"previous_state": "cancelled", "cancelled_by_this_call": false},
	}
	if g, w := mustJSON(t, got), mustJSON(t, want); g != w {
		t.Errorf("work cancel --json = %s\nwant %s", g, w)
	}
	if strings.Contains(r.stdout, "secret-output-of-ok") {
		t.Errorf("work cancel --json printed the unit's output: %q", r.stdout)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestWorkCancelStopsWhenACallFails: a call that fails for a reason other
// than the id (here the automator answering Internal) stops the command
// with 255 and one line, after the rows of the units cancelled before it;
// the ids after it are left alone.
func TestWorkCancelStopsWhenACallFails(t *testing.T) {
	t.Parallel()
	a, c, broken := startWithAFailingGet(t)
	first, second, third := submit(t, c, "x.sh"), submit(t, c, "x.sh"), submit(t, c, "x.sh")
	broken.Store(second.ID)

	r := runCancel(t, first.ID, second.ID, third.ID, "--server", a.URL(), "--api-key-file", a.APIKeyFile, "--ca", a.CAFile)
	if r.code != ExitError || r.stderr != "automator: getting work "+second.ID+": Internal: internal error\n" {
		t.Errorf("work cancel with a call failing: exit %d, stderr %q; want %d and one line naming the unit", r.code, r.stderr, ExitError)
	}
	want := []string{first.ID, "acme", "cancelled", "-", "-", "cancelled it (was queued)"}
	if got := rows(t, r.stdout); len(got) != 1 || !slices.Equal(got[0][:len(want)], want) {
		t.Errorf("work cancel printed %q; want the row of the unit cancelled before the failure, %q", r.stdout, want)
	}
	for id, state := range map[string]client.State{first.ID: client.StateCancelled, second.ID: client.StateQueued, third.ID: client.StateQueued} {
		if w, err := a.Store.WorkGet(t.Context(), id); err != nil || string(w.State) != string(state) {
			t.Errorf("unit %s after the failed call: %s, %v; want %s", id, w.State, err, state)
		}
	}
}

// TestWorkCancelJSONPrintsAnArrayWhenTheFirstCallFails: with --json, a
// command that fails before any unit is done still prints an array, empty,
// so a script reading it gets JSON, as work wait's; the exit status is the
// command's failure, 255.
func TestWorkCancelJSONPrintsAnArrayWhenTheFirstCallFails(t *testing.T) {
	t.Parallel()
	a, c, broken := startWithAFailingGet(t)
	first := submit(t, c, "x.sh")
	broken.Store(first.ID)

	r := runCancel(t, first.ID, "--json", "--server", a.URL(), "--api-key-file", a.APIKeyFile, "--ca", a.CAFile)
	if r.code != ExitError || r.stdout != "[]\n" {
		t.Errorf("work cancel --json with its first call failing: exit %d, stdout %q, stderr %q; want %d and []", r.code, r.stdout, r.stderr, ExitError)
	}
}

// isRefused tells whether v is a refused id's entry in a --json array:
// the id as given, why (holding why), and no state.
func isRefused(v map[string]any, id, why string) bool {
	r, ok := v["refused"].(string)
	_, hasState := v["state"]
	return v["work_id"] == id && ok && strings.Contains(r, why) && !hasState
}

// TestWorkCancelJSONListsRefusedIDsInPlace: with --json, as with work
// wait, every id is in the array in the order given, a refused one as
// {"work_id": the id as given, "refused": why} with no state; stderr still
// names each refused id in order, and the exit status is 1.
func TestWorkCancelJSONListsRefusedIDsInPlace(t *testing.T) {
	t.Parallel()
	s := serveInProcess(t)
	s.account(t, "acme")
	c := s.client(t)
	w := submit(t, c, "anything.sh")

	r := s.cancelCLI(t, unknownID, w.ID, "not-a-work-id", "--json")
	if r.code != ExitSomeIDRefused {
		t.Errorf("work cancel --json of an unknown, a queued and a malformed id: exit %d, want %d", r.code, ExitSomeIDRefused)
	}
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "automator: cancelling work "+unknownID+": there is no such unit") ||
		!strings.HasPrefix(lines[1], `automator: cancelling work "not-a-work-id": not a work id`) {
		t.Errorf("stderr %q: want one line for the unknown id, then one for the malformed one", r.stderr)
	}
	var got []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got) != 3 {
		t.Fatalf("work cancel --json printed %q (%v); want the three ids", r.stdout, err)
	}
	_, unitRefused := got[1]["refused"]
	if !isRefused(got[0], unknownID, "no such unit") ||
		got[1]["work_id"] != w.ID || got[1]["state"] != "cancelled" || got[1]["cancelled_by_this_call"] != true || unitRefused ||
		!isRefused(got[2], "not-a-work-id", "not a work id") {
		t.Errorf("work cancel --json = %s; want the unknown id refused, the unit cancelled by this call, the malformed id refused", r.stdout)
	}
}

// TestWorkCancelReportsRefusedIDsBeforeAnErrorEndsIt: when a call fails
// for a reason other than the id (here the automator answering Internal),
// the ids refused until then are reported first, one line each, then the
// error; so is a malformed id given after the failing one, refused before
// any call; with --json the array of what it got to holds them in their
// place; the exit status is the command's failure, 255.
func TestWorkCancelReportsRefusedIDsBeforeAnErrorEndsIt(t *testing.T) {
	t.Parallel()
	a, c, broken := startWithAFailingGet(t)
	first, second := submit(t, c, "x.sh"), submit(t, c, "x.sh")
	broken.Store(second.ID)

	r := runCancel(t, unknownID, first.ID, second.ID, "not-a-work-id", "--json", "--server", a.URL(), "--api-key-file", a.APIKeyFile, "--ca", a.CAFile)
	want := "automator: cancelling work " + unknownID + ": there is no such unit (unknown id, deleted past work_retention, or of an account the API key may not use)\n" +
		`automator: cancelling work "not-a-work-id": ` + notAWorkID + "\n" +
		"automator: getting work " + second.ID + ": Internal: internal error\n"
	if r.code != ExitError || r.stderr != want {
		t.Errorf("work cancel with an unknown id, then a call failing: exit %d, stderr %q; want %d and %q", r.code, r.stderr, ExitError, want)
	}
	var got []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || len(got) != 3 {
		t.Fatalf("work cancel --json printed %q (%v); want the unknown id, the unit cancelled before the failure and the malformed id", r.stdout, err)
	}
	if !isRefused(got[0], unknownID, "no such unit") || got[1]["work_id"] != first.ID || got[1]["state"] != "cancelled" ||
		!isRefused(got[2], "not-a-work-id", "not a work id") {
		t.Errorf("work cancel --json = %s; want the unknown id refused, %s cancelled, the malformed id refused", r.stdout, first.ID)
	}
}

// TestWorkCancelOfTheSameIDTwiceSaysThisCallCancelledIt: an id given twice
// is cancelled once, and both its entries say what this call found and
// did: it cancelled the unit, which was queued; not, for the second, that
// the unit was "already cancelled", as if another caller had.
func TestWorkCancelOfTheSameIDTwiceSaysThisCallCancelledIt(t *testing.T) {
	t.Parallel()
	s := serveInProcess(t)
	s.account(t, "acme")
	c := s.client(t)
	first, second := submit(t, c, "anything.sh"), submit(t, c, "anything.sh")

	r := s.cancelCLI(t, first.ID, first.ID)
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("work cancel of one id twice: exit %d, stderr %q; want 0 and nothing", r.code, r.stderr)
	}
	want := []string{first.ID, "acme", "cancelled", "-", "-", "cancelled it (was queued)"}
	got := rows(t, r.stdout)
	if len(got) != 2 || !slices.Equal(got[0][:len(want)], want) || !slices.Equal(got[1][:len(want)], want) {
		t.Errorf("work cancel of one id twice printed %q; want two rows starting %q", r.stdout, want)
	}

	r = s.cancelCLI(t, second.ID, unknownID, second.ID, "--json")
	if r.code != ExitSomeIDRefused || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("work cancel --json of an id twice and an unknown one: exit %d, stderr %q; want %d and one line", r.code, r.stderr, ExitSomeIDRefused)
	}
	var entries []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &entries); err != nil || len(entries) != 3 {
		t.Fatalf("work cancel --json printed %q (%v); want an entry per id given", r.stdout, err)
	}
	for _, e := range []map[string]any{entries[0], entries[2]} {
		if e["work_id"] != second.ID || e["previous_state"] != "queued" || e["cancelled_by_this_call"] != true {
			t.Errorf("work cancel --json = %s; want both entries of %s cancelled by this call, found queued", r.stdout, second.ID)
		}
	}
	if !isRefused(entries[1], unknownID, "no such unit") {
		t.Errorf("work cancel --json = %s; want the unknown id refused in its place", r.stdout)
	}
}

// startWithAFailingGet starts an automator whose Get of the unit stored in
// broken (none at first) answers Internal, and a client of it.
func startWithAFailingGet(t *testing.T) (*automatortest.Automator, *client.Client, *atomic.Value) {
	t.Helper()
	broken := new(atomic.Value)
	broken.Store("")
	a := automatortest.Start(t, automatortest.Options{Interceptors: []grpc.UnaryServerInterceptor{
		func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if g, ok := req.(*automatorv1.GetRequest); ok && g.GetWorkId() == broken.Load() {
				return nil, status.Error(codes.Internal, "internal error")
			}
			return h(ctx, req)
		},
	}})
	c, err := client.New(client.Config{Addresses: []string{a.URL()}, APIKey: a.APIKey, CAPEM: a.CAPEM})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return a, c, broken
}
