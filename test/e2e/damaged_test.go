//go:build linux

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/internal/loglimit"
	"github.com/opsgate/opsgate/internal/proctest"
	"github.com/opsgate/opsgate/internal/sqlitetest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// An automator whose SQLite database is damaged where units that end
// without success are indexed (a bad sector, say) fails the calls that
// touch that part, each with one precise error (DataLoss) and the log
// with at most 20 lines a minute saying what to do; everything else is
// served: work runs, the queue is read. Once serve is stopped, `automator
// repair` rebuilds the database with nothing lost, and the call that
// failed succeeds.
func TestADamagedDatabaseFailsOnlyWhatTouchesTheDamageUntilRepairRebuildsIt(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	cfg := a.createAccount(t, "acme")
	a.createAccount(t, "idle") // no proxy: its units stay queued
	scripts := t.TempDir()
	writeScript(t, scripts, "hello.sh", `echo "hello $1"`)
	p := startProxy(t, cfg, scripts, "a")
	p.WaitPolling(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hello := func(who string) error {
		st, err := a.Client(t).ExecuteOnProxy(ctx, &automatorv1.ExecuteRequest{Account: "acme",
			Command: &automatorv1.Command{Script: "hello.sh", Args: []string{who}}, Timeout: durationpb.New(time.Minute)})
		switch {
		case err != nil:
			return err
		case st.GetState() != automatorv1.State_STATE_SUCCEEDED || string(st.GetResult().GetStdout()) != "hello "+who+"\n":
			return fmt.Errorf("unit ended %v (%s), stdout %q", st.GetState(), st.GetReason(), st.GetResult().GetStdout())
		}
		return nil
	}
	if err := hello("before"); err != nil {
		t.Fatalf("a call before the damage: %v", err)
	}
	// serve checks its database as it starts (SQLite's quick_check).
	proctest.WaitFor(t, 30*time.Second, "serve's check of its database", func() bool {
		return strings.Contains(a.Log(), `msg="database checked: SQLite's quick_check found nothing wrong"`)
	})
	var queued []string
	for range 3 {
		w, err := a.Client(t).Submit(ctx, &automatorv1.ExecuteRequest{Account: "idle", Command: &automatorv1.Command{Script: "hello.sh"}, Timeout: durationpb.New(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		queued = append(queued, w.GetWorkId())
	}

	// Stopped, serve leaves its database whole in one file (its
	// write-ahead log checkpointed into it); the first page of the index
	// of units that ended without success is then overwritten.
	p.Stop(t, 30*time.Second)
	a.proc.Signal(t, syscall.SIGTERM)
	if code := a.proc.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("serve exited %d on SIGTERM", code)
	}
	dbPath := filepath.Join(a.DataDir, "automator.db")
	if _, err := os.Stat(dbPath + "-wal"); err == nil {
		t.Fatal("serve left a write-ahead log beside the database")
	}
	sqlitetest.DamageFirstPage(t, dbPath, "work_unsuccessful")
	a.Restart(t)
	// Said as serve starts, before any call meets it, with what to do.
	checked := `msg="the database is damaged: SQLite's quick_check found problems; the calls that read or write the damaged pages fail until it is repaired"`
	proctest.WaitFor(t, 30*time.Second, "serve's check to find the damage", func() bool { return strings.Contains(a.Log(), checked) })
	if log := a.Log(); strings.Count(log, checked) != 1 || !strings.Contains(log, "repair=\"stop serve, then run `automator repair --data-dir "+a.DataDir+"`") {
		t.Errorf("serve's check of the damaged database, once, saying what to do:\n%s", log)
	}
	p = startProxy(t, cfg, scripts, "a")
	p.WaitPolling(t)

	// A cancel ends a unit as cancelled, which that index holds.
	const refusal = "the automator's database is damaged: cancelling work failed, and fails until its operator repairs the database"
	calls := loglimit.DefaultLines + 5
	for range calls {
		_, err := a.Client(t).Cancel(ctx, &automatorv1.CancelRequest{WorkId: queued[0]})
		if st := status.Convert(err); st.Code() != codes.DataLoss || st.Message() != refusal {
			t.Fatalf("Cancel on the damaged database: %v; want DataLoss: %s", err, refusal)
		}
	}
	r := runCLI(bin.automator, "work", "cancel", queued[0], "--data-dir", a.DataDir)
	if r.Code == 0 || !strings.Contains(r.Stderr, refusal) {
		t.Errorf("automator work cancel on the damaged database: %s; want it to fail saying %q", r, refusal)
	}
	// The rest is served.
	if err := hello("during"); err != nil {
		t.Errorf("a call that does not touch the damage: %v", err)
	}
	if r := runCLI(bin.automator, "work", "list", "--data-dir", a.DataDir, "--account", "idle", "--state", "queued"); r.Code != 0 || strings.Count(r.Stdout, "queued") != 3 {
		t.Errorf("work list --state queued on the damaged database: %s; want the 3 units", r)
	}
	if n, err := proctest.MetricValue(a.HTTPAddr, `automator_store_errors_total{kind="damaged"}`); err != nil || n < calls {
		t.Errorf(`automator_store_errors_total{kind="damaged"} = %d, %v; want at least %d`, n, err, calls)
	}
	log := a.Log()
	lines := strings.Count(log, `msg="the database is damaged: the calls that read or write its damaged part fail until it is repaired"`)
	if lines != loglimit.DefaultLines || !strings.Contains(log, "repair=\"stop serve, then run `automator repair --data-dir "+a.DataDir+"` (docs/backup.md)\"") {
		t.Errorf("%d lines of the damage for %d failed calls (want %d within the minute), saying what to do:\n%s", lines, calls+1, loglimit.DefaultLines, log)
	}
	if strings.Contains(log, `msg="internal error"`) {
		t.Errorf("the damage was logged as an internal error:\n%s", log)
	}

	// Repair: refused while serve runs; with serve stopped, the database
	// rebuilt and the damaged one kept aside.
	if r := runCLI(bin.automator, "repair", "--data-dir", a.DataDir); r.Code == 0 || !strings.Contains(r.Stderr, "an automator serve or another command is using") {
		t.Errorf("repair while serve runs: %s; want it refused", r)
	}
	p.Stop(t, 30*time.Second)
	a.proc.Signal(t, syscall.SIGTERM)
	a.proc.Wait(t, 30*time.Second)
	r = runCLI(bin.automator, "repair", "--data-dir", a.DataDir)
	if r.Code != 0 || !strings.Contains(r.Stdout, dbPath+" was damaged: SQLite's integrity_check found") || !strings.Contains(r.Stdout, "rebuilt it from its tables' rows, no row lost or changed") {
		t.Fatalf("repair: %s", r)
	}
	aside, _ := filepath.Glob(dbPath + ".damaged-*")
	if len(aside) != 1 || !strings.Contains(r.Stdout, "the damaged database is kept as "+aside[0]) {
		t.Errorf("the damaged database kept as %q; repair said:\n%s", aside, r.Stdout)
	}
	if check := sqlitetest.IntegrityCheck(t, dbPath); check != "ok" {
		t.Errorf("integrity_check of the repaired database: %s", check)
	}
	if r := runCLI(bin.automator, "repair", "--data-dir", a.DataDir); r.Code != 0 || !strings.Contains(r.Stdout, "is whole (SQLite's integrity_check: ok, and each index agrees with its table): nothing to repair") {
		t.Errorf("repair of the repaired database: %s", r)
	}
	a.Restart(t)
	p = startProxy(t, cfg, scripts, "a")
	p.WaitPolling(t)
	if _, err := a.Client(t).Cancel(ctx, &automatorv1.CancelRequest{WorkId: queued[0]}); err != nil {
		t.Errorf("Cancel after the repair: %v", err)
	}
	for i, id := range queued {
		want := automatorv1.State_STATE_QUEUED
		if i == 0 {
			want = automatorv1.State_STATE_CANCELLED
		}
		if st, err := a.Client(t).Get(ctx, &automatorv1.GetRequest{WorkId: id}); err != nil || st.GetState() != want {
			t.Errorf("unit %s after the repair: %v, %v; want %v", id, st.GetState(), err, want)
		}
	}
	if err := hello("after"); err != nil {
		t.Errorf("a call after the repair: %v", err)
	}
	if r := runCLI(bin.automator, "audit", "--data-dir", a.DataDir, "--kind", "database.repair"); r.Code != 0 || !strings.Contains(r.Stdout, "database rebuilt from its tables' rows") {
		t.Errorf("the audit log's record of the repair: %s", r)
	}
}
