//go:build linux

package e2e

import (
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/proctest"
)

// TestServeOnATakenPortIsErrAddrInUse: a serve whose gRPC port another
// process holds fails in a way WaitServing reports as
// proctest.ErrAddrInUse, the one failure the harnesses retry on another
// port; a serve that fails otherwise is not reported so.
func TestServeOnATakenPortIsErrAddrInUse(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	dir := filepath.Join(t.TempDir(), "data")
	if r := runCLI(bin.automator, "init", "--data-dir", dir, "--public-url", "https://"+held.Addr().String()); r.Code != 0 {
		t.Fatalf("automator init: %v", r)
	}
	p := proctest.Start(t, "automator-taken", bin.automator, "serve", "--data-dir", dir, "--listen", held.Addr().String(), "--http-listen", "127.0.0.1:0")
	if _, err := proctest.WaitServing(p, dir, 15*time.Second); !errors.Is(err, proctest.ErrAddrInUse) {
		t.Errorf("serve on a port held by another listener: WaitServing returned %v; want ErrAddrInUse", err)
	}

	// Another failure: a data directory that does not exist.
	missing := filepath.Join(t.TempDir(), "missing")
	p = proctest.Start(t, "automator-missing", bin.automator, "serve", "--data-dir", missing, "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0")
	if _, err := proctest.WaitServing(p, missing, 15*time.Second); err == nil || errors.Is(err, proctest.ErrAddrInUse) {
		t.Errorf("serve of a missing data directory: WaitServing returned %v; want an error other than ErrAddrInUse", err)
	}
}
