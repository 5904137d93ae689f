//go:build linux

package chaos

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/internal/proctest"
)

// TestServeTriesAgainOnlyWhenItsAddressIsTaken: the harness's Serve starts
// `automator serve` again on its port only when a start failed because
// the port was taken, once it is free; any other failure is reported at
// once, after one start.
func TestServeTriesAgainOnlyWhenItsAddressIsTaken(t *testing.T) {
	dir := t.TempDir()
	a := newAutomator(t, dir, "127.0.0.1", false)
	held, err := net.Listen("tcp", a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	var taken error
	a.onAddrInUse = func(err error) { taken = err; held.Close() }
	if err := a.Serve(); err != nil {
		t.Fatalf("Serve on a port freed after its first start failed: %v", err)
	}
	if !errors.Is(taken, proctest.ErrAddrInUse) || a.attempts != 2 {
		t.Errorf("Serve on a port held at first: %d starts, first failure %v; want 2 starts, the first ErrAddrInUse", a.attempts, taken)
	}
	a.Kill()

	// Another failure: the master key is gone.
	a.onAddrInUse = nil
	if err := os.Remove(filepath.Join(a.DataDir, config.FileMasterKey)); err != nil {
		t.Fatal(err)
	}
	before := a.attempts
	err = a.Serve()
	if err == nil || errors.Is(err, proctest.ErrAddrInUse) {
		t.Fatalf("Serve without a master key returned %v; want an error other than ErrAddrInUse", err)
	}
	if n := a.attempts - before; n != 1 {
		t.Errorf("Serve without a master key started serve %d times, want 1 (%v)", n, err)
	}
}
