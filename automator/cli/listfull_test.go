//go:build linux

package cli

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// TestAListingThatCannotBeWrittenFailsTheCommand: a listing whose stdout
// cannot take it (`> /dev/full`, a full disk under `> audit.txt`) has
// printed nothing a script can rely on: it exits 255 saying why ("no space
// left on device"), as `account list` does, not 0 over an empty file. The
// audit log (table and --json) and the replicas table, with and without a
// replica; and the listings' single line that says nothing matches (no
// account yet, no unit, no instance), which a script reads as an answer too.
func TestAListingThatCannotBeWrittenFailsTheCommand(t *testing.T) {
	t.Parallel()
	empty := initDir(t) // no replica has sent a heartbeat
	dir := initDir(t)
	if code, _, stderr := runMain(t, "account", "create", "acme", "--data-dir", dir); code != 0 {
		t.Fatalf("account create acme: exit %d: %s", code, stderr)
	}
	st, _ := openDirStore(t, dir)
	now := time.Now()
	err := st.ReplicaHeartbeat(t.Context(), store.ReplicaHeartbeatParams{ReplicaID: "r1", Hostname: "host", Version: "v1", StartedAt: now, Now: now})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"account", "list", "--data-dir", dir},
		{"audit", "--data-dir", dir},
		{"audit", "--json", "--data-dir", dir},
		{"replicas", "--data-dir", dir},
		{"replicas", "--data-dir", empty},
		{"account", "list", "--data-dir", empty},
		{"work", "list", "--data-dir", empty},
		{"instances", "--account", "acme", "--data-dir", dir},
	} {
		full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
		if err != nil {
			t.Skipf("no /dev/full: %v", err)
		}
		var errb bytes.Buffer
		code := Main(t.Context(), args, Env{Stdout: full, Stderr: &errb})
		full.Close()
		if code != ExitError || !strings.Contains(errb.String(), "no space left on device") {
			t.Errorf("automator %s > /dev/full: exit %d, stderr %q; want exit %d saying %q", strings.Join(args, " "), code, errb.String(), ExitError, "no space left on device")
		}
	}
}
