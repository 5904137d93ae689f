//go:build linux

package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/automator/store"
)

// endedThenDeleted serves an automator, runs a unit to its end (exit 0) on
// account acme and one on globex, then deletes acme: its unit is ended and
// unreadable for good.
func endedThenDeleted(t *testing.T) (s *served, gone, kept client.Result) {
	t.Helper()
	s = serveInProcess(t)
	if err := os.WriteFile(filepath.Join(s.scripts, "exit.sh"), []byte("#!/bin/sh\nexit \"$1\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s.proxy(t, s.account(t, "acme"), "p1")
	s.proxy(t, s.account(t, "globex"), "g1")
	c := s.client(t)
	gone, err := c.ExecuteOnProxy(t.Context(), "acme", client.Command{Script: "exit.sh", Args: []string{"0"}})
	if err != nil {
		t.Fatalf("running exit.sh on acme: %v", err)
	}
	kept, err = c.ExecuteOnProxy(t.Context(), "globex", client.Command{Script: "exit.sh", Args: []string{"0"}})
	if err != nil {
		t.Fatalf("running exit.sh on globex: %v", err)
	}
	if code, _, stderr := runMain(t, "account", "delete", "acme", "--data-dir", s.dir); code != 0 {
		t.Fatalf("account delete acme: exit %d: %s", code, stderr)
	}
	return s, gone, kept
}

// TestWorkWaitReportsAUnitOfADeletedAccountAsEnded: a unit that ended with
// a result before its account was deleted has ended for good, and its
// result can no longer be read. `work wait` given it among other units
// must not stop there: it waits for the others and prints every unit, this
// one with its state, its account's deleted name, no exit code and a
// reason saying why, and exits 1 as for any unit not known to have
// exited 0.
func TestWorkWaitReportsAUnitOfADeletedAccountAsEnded(t *testing.T) {
	t.Parallel()
	s, gone, kept := endedThenDeleted(t)
	code, out, stderr := runMain(t, "work", "wait", gone.WorkID, kept.WorkID, "--data-dir", s.dir, "--json")
	if code != ExitNotAllSucceeded {
		t.Fatalf("work wait of a unit of a deleted account and one of globex: exit %d, stdout %q, stderr %q; want %d and both units", code, out, stderr, ExitNotAllSucceeded)
	}
	var got []waitJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("work wait --json printed %q: %v", out, err)
	}
	if len(got) != 2 {
		t.Fatalf("work wait --json printed %d units, want 2: %s", len(got), out)
	}
	name, deleted := store.DeletedAccount(got[0].Account)
	if got[0].ID != gone.WorkID || !deleted || name != "acme" || got[0].State != "succeeded" || got[0].ExitCode != nil || got[0].InstanceID != "p1" ||
		!strings.Contains(got[0].Reason, "deleted") {
		t.Errorf("the unit of the deleted account: %+v; want it succeeded on p1, of acme's deleted name, with no exit code and a reason saying its account was deleted", got[0])
	}
	if got[1].ID != kept.WorkID || got[1].State != "succeeded" || got[1].ExitCode == nil || *got[1].ExitCode != 0 {
		t.Errorf("globex's unit: %+v; want it succeeded with exit code 0", got[1])
	}

	code, out, _ = runMain(t, "work", "wait", gone.WorkID, "--data-dir", s.dir)
	if r := rows(t, out); code != ExitNotAllSucceeded || len(r) != 1 || !slices.Equal(r[0][2:4], []string{"succeeded", "-"}) {
		t.Errorf("work wait of the unit of the deleted account: exit %d, table %q; want %d and a row succeeded, exit -", code, out, ExitNotAllSucceeded)
	}
}

// TestWorkCancelCountsAUnitOfADeletedAccountAsEnded: `work cancel` of a
// unit that ended with a result before its account was deleted finds it
// ended, which counts as done (exit 0), as for any unit that had ended.
func TestWorkCancelCountsAUnitOfADeletedAccountAsEnded(t *testing.T) {
	t.Parallel()
	s, gone, _ := endedThenDeleted(t)
	r := s.cancelCLI(t, gone.WorkID)
	if got := rows(t, r.stdout); r.code != 0 || r.stderr != "" || len(got) != 1 || !slices.Equal(got[0][:4], []string{gone.WorkID, got[0][1], "succeeded", "-"}) ||
		!strings.HasPrefix(got[0][1], "acme (deleted ") {
		t.Errorf("work cancel of a unit of a deleted account that had ended: exit %d, stdout %q, stderr %q; want 0 and its row, succeeded, of acme's deleted name", r.code, r.stdout, r.stderr)
	}
}
