//go:build linux

package chaos

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/internal/proctest"
	"github.com/opsgate/opsgate/internal/waittest"
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

// TestSeenMatchesALineWrittenBeforeItWasAsked: what a process says at once
// may be read before the harness asks for it; Seen matches it all the
// same (as it matches a line written later), where Watch would wait for
// another.
func TestSeenMatchesALineWrittenBeforeItWasAsked(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "go-on")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := startProc(t, "sh", filepath.Join(dir, "sh.log"), nil, "/bin/sh", "-c", `echo early; read x <"$0"; echo late`, fifo)
	if err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, "the first line to be read", func() bool { return p.Count("early") == 1 })
	waittest.Recv(t, p.Seen("early"), "Seen to match the line written before it was asked")
	late := p.Seen("late")
	select {
	case <-late:
		t.Fatal("Seen matched a line not written yet")
	default:
	}
	if err := os.WriteFile(fifo, []byte("go on\n"), 0); err != nil {
		t.Fatal(err)
	}
	waittest.Recv(t, late, "Seen to match a line written after it was asked")
}
