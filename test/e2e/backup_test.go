//go:build linux

package e2e

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// A backup taken while the automator serves, with two units running on a
// proxy and four queued, holds them so. Restore is refused while serve
// runs. Afterwards all six run to success; the automator crashes; the
// backup is restored: the six units, open in it, end timed_out (each may
// have run after the backup, as they did), a caller waiting by id gets the
// timeout, and the proxy, polling again, runs a new unit but none of the
// six a second time (at most once).
func TestRestoreNeverRunsAUnitOpenInTheBackupAgain(t *testing.T) {
	t.Parallel()
	const units = 6
	a := startAutomator(t)
	cfg := withSettings(t, a.createAccount(t, "acme"), "max_concurrency: 2")
	scripts, dir := t.TempDir(), t.TempDir()
	runs, release := filepath.Join(dir, "runs.log"), filepath.Join(dir, "release")
	writeScript(t, scripts, "gate.sh", `echo "start $PROXY_WORK_ID $1" >> "$2"
while [ ! -e "$3" ] && [ -d "${3%/*}" ]; do sleep 0.05; done
echo "out-$1"`)
	p := startProxy(t, cfg, scripts, "a")
	p.WaitPolling(t)

	c := a.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	submit := func(i int) string {
		st, err := c.Submit(ctx, &automatorv1.ExecuteRequest{
			Account: "acme",
			Command: &automatorv1.Command{Script: "gate.sh", Args: []string{strconv.Itoa(i), runs, release}},
			Timeout: durationpb.New(90 * time.Second),
		})
		if err != nil {
			t.Fatalf("Submit %d: %v", i, err)
		}
		return st.GetWorkId()
	}
	ids := make([]string, units)
	for i := range ids {
		ids[i] = submit(i)
	}
	starts := func() map[string]int {
		n := map[string]int{}
		for _, l := range lines(runs) {
			if f := strings.Fields(l); len(f) == 3 && f[0] == "start" {
				n[f[1]]++
			}
		}
		return n
	}
	waitFor(t, 10*time.Second, "two units to start", func() bool { return len(starts()) >= 2 })

	backup := filepath.Join(t.TempDir(), "automator.backup")
	if r := runCLI(bin.automator, "backup", "--data-dir", a.DataDir, backup); r.Code != 0 {
		t.Fatalf("backup while serving: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if got := statesIn(t, backup); got[store.StateClaimed] != 2 || got[store.StateQueued] != units-2 {
		t.Fatalf("the backup holds units in states %v; want 2 claimed and %d queued", got, units-2)
	}
	if r := runCLI(bin.automator, "restore", "--data-dir", a.DataDir, backup); r.Code != 255 || !strings.Contains(r.Stderr, "an automator serve or another command is using") {
		t.Fatalf("restore while serving: exit %d, stderr %q; want 255, refused because serve runs", r.Code, r.Stderr)
	}

	writeFile(t, release, "")
	for i, id := range ids {
		if st, err := waitWork(ctx, c, id); err != nil || st.GetState() != automatorv1.State_STATE_SUCCEEDED {
			t.Fatalf("unit %d (%s) before the restore: %v, %v; want SUCCEEDED", i, id, st.GetState(), err)
		}
	}
	a.Kill(t) // its write-ahead log stays behind, as after any crash

	r := runCLI(bin.automator, "restore", "--data-dir", a.DataDir, backup)
	if r.Code != 0 || !strings.Contains(r.Stdout, "ended 6 units open in the backup as timed_out (4 queued, 2 claimed)") {
		t.Fatalf("restore: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if got := statesIn(t, asideOf(t, r.Stdout)); got[store.StateSucceeded] != units {
		t.Errorf("the database kept aside holds units in states %v; want the %d that succeeded", got, units)
	}
	a.Restart(t)

	for i, id := range ids {
		st, err := waitWork(ctx, c, id)
		if err != nil || st.GetState() != automatorv1.State_STATE_TIMED_OUT || !strings.Contains(st.GetReason(), "restore") {
			t.Errorf("unit %d (%s) waited for after the restore: %v (%q), %v; want TIMED_OUT by the restore", i, id, st.GetState(), st.GetReason(), err)
		}
	}
	// The proxy polls the restored automator: it claims and runs a new
	// unit, and would have claimed the old ones first had any been queued.
	fresh := submit(units)
	if st, err := waitWork(ctx, c, fresh); err != nil || st.GetState() != automatorv1.State_STATE_SUCCEEDED {
		t.Fatalf("a unit queued after the restore: %v, %v; want SUCCEEDED", st.GetState(), err)
	}
	n := starts()
	for _, id := range append(ids, fresh) {
		if n[id] != 1 {
			t.Errorf("unit %s started %d times, want once", id, n[id])
		}
	}
	audit := runCLI(bin.automator, "audit", "--data-dir", a.DataDir, "--json")
	if got := strings.Count(audit.Stdout, `"detail":"restore"`); got != units {
		t.Errorf("the audit log holds %d records of units ended by the restore, want %d:\n%s", got, units, audit.Stdout)
	}
}

// statesIn counts the units of a database file by state, reading a copy
// (opening a store may change its file).
func statesIn(t *testing.T, path string) map[store.State]int {
	t.Helper()
	cp := filepath.Join(t.TempDir(), "copy.db")
	in, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(cp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	out.Close()
	if wal, err := os.ReadFile(path + "-wal"); err == nil {
		if err := os.WriteFile(cp+"-wal", wal, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	st, err := sqlitestore.Open(t.Context(), cp)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ws, err := st.WorkList(t.Context(), store.WorkListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	n := map[store.State]int{}
	for _, w := range ws {
		n[w.State]++
	}
	return n
}

// asideOf is the path restore printed it kept the replaced database under.
func asideOf(t *testing.T, stdout string) string {
	t.Helper()
	for _, l := range strings.Split(stdout, "\n") {
		if p, ok := strings.CutPrefix(l, "the database it replaced is kept as "); ok {
			return p
		}
	}
	t.Fatalf("restore did not say where it kept the replaced database:\n%s", stdout)
	return ""
}
