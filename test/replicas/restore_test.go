//go:build linux

package replicas

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestOpenWorkOnlyEndsTheOpenUnitsOfARestoredPostgreSQL: after a
// PostgreSQL restore, `automator restore --open-work-only` ends every open
// unit as timed_out before any replica serves again, so none runs twice.
// It is refused while a replica's heartbeat is fresh. Here one unit runs
// and two are queued; the database is not really restored (PostgreSQL's
// tools do that), the open units are what matters.
func TestOpenWorkOnlyEndsTheOpenUnitsOfARestoredPostgreSQL(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	c := newCluster(t, dsn, 1)
	c.Start(t)
	r := c.Replicas[0]
	profile := c.createAccount(t, "acme")
	scripts, dir := t.TempDir(), t.TempDir()
	runs, release := filepath.Join(dir, "runs.log"), filepath.Join(dir, "release")
	writeScript(t, scripts, "gate.sh", `echo "start $PROXY_WORK_ID" >> "$1"
while [ ! -e "$2" ] && [ -d "${2%/*}" ]; do sleep 0.05; done`)
	startProxy(t, proxyConfig(t, profile, r, "max_concurrency: 1"), scripts, "pa")

	caller := c.callers(t)[0]
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	submit := func(i int) string {
		st, err := caller.Submit(ctx, &automatorv1.ExecuteRequest{Account: "acme",
			Command: &automatorv1.Command{Script: "gate.sh", Args: []string{runs, release, strconv.Itoa(i)}},
			Timeout: durationpb.New(90 * time.Second)})
		if err != nil {
			t.Fatalf("Submit: %v", err)
		}
		return st.GetWorkId()
	}
	ids := []string{submit(0), submit(1), submit(2)}
	if !poll(20*time.Second, func() bool { return len(lines(runs)) == 1 }) {
		t.Fatalf("no unit started within 20s")
	}

	restore := func() (int, string, string) {
		return run(bin.automator, "restore", "--data-dir", r.DataDir, "--open-work-only")
	}
	if code, _, stderr := restore(); code != 255 || !strings.Contains(stderr, "replica r0") {
		t.Fatalf("restore --open-work-only while r0 serves: exit %d, stderr %q; want 255, naming replica r0", code, stderr)
	}
	r.proc.Signal(t, syscall.SIGTERM)
	if code := r.proc.Wait(t, 20*time.Second); code != 0 {
		t.Fatalf("r0 exited %d", code)
	}
	// Its last heartbeat, as it would be 15 s later (no replica serves).
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE replicas SET last_seen = last_seen - interval '1 minute'`); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)

	code, stdout, stderr := restore()
	if code != 0 || !strings.Contains(stdout, "ended 3 units open in the backup as timed_out (2 queued, 1 claimed)") {
		t.Fatalf("restore --open-work-only: exit %d\n%s%s", code, stdout, stderr)
	}
	if err := os.WriteFile(release, nil, 0o600); err != nil { // the running script ends; its result is refused
		t.Fatal(err)
	}
	c.Start(t)
	for _, id := range ids {
		st, err := caller.Get(ctx, &automatorv1.GetRequest{WorkId: id})
		if err != nil || st.GetState() != automatorv1.State_STATE_TIMED_OUT || !strings.Contains(st.GetReason(), "restore") {
			t.Errorf("unit %s after the restore: %v (%q), %v; want TIMED_OUT by the restore", id, st.GetState(), st.GetReason(), err)
		}
	}
	fresh := submit(3)
	if !poll(30*time.Second, func() bool {
		st, err := caller.Get(ctx, &automatorv1.GetRequest{WorkId: fresh})
		return err == nil && st.GetState() == automatorv1.State_STATE_SUCCEEDED
	}) {
		t.Fatalf("a unit queued after the restore did not succeed within 30s")
	}
	if got := lines(runs); len(got) != 2 {
		t.Errorf("runs after the restore: %q; want the one running before it and the new one, none of the queued ones", got)
	}
}

// TestOpenWorkOnlyIsRefusedWhileAPausedReplicaHoldsItsID: a replica
// paused (SIGSTOP, as a frozen host) sends no heartbeat, so its last one
// ages, but it may go on serving once it resumes: `automator restore
// --open-work-only` is refused while it holds its replica id.
func TestOpenWorkOnlyIsRefusedWhileAPausedReplicaHoldsItsID(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	c := newCluster(t, dsn, 1)
	c.Start(t)
	r := c.Replicas[0]
	r.proc.Signal(t, syscall.SIGSTOP)
	defer r.proc.Signal(t, syscall.SIGCONT)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var code int
	var stdout, stderr string
	// A heartbeat sent just before the pause may land after the first
	// ageing: then the restore is refused for it, and the second goes
	// (the paused replica sends no more).
	for range 2 {
		// Its last heartbeat, as it would be 15 s later.
		if _, err := conn.Exec(ctx, `UPDATE replicas SET last_seen = now() - interval '1 minute'`); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr = run(bin.automator, "restore", "--data-dir", r.DataDir, "--open-work-only")
		if !strings.Contains(stderr, "sent a heartbeat") {
			break
		}
	}
	if code != 255 || !strings.Contains(stderr, "replica r0 still runs") {
		t.Fatalf("restore --open-work-only while r0 is paused: exit %d, stdout %q, stderr %q; want 255, naming replica r0", code, stdout, stderr)
	}
}
