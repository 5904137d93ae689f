//go:build unix

package stopsignal

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// TestAWindowsServiceWatchesNoSignal: under the Windows Service Control
// Manager List is empty, since Go delivers a user's logoff to a service
// process as SIGTERM, and NotifyContext then watches no signal at all:
// signal.NotifyContext with an empty list would take every signal, so that
// one of those a process gets in passing (SIGWINCH here, whose default is
// to ignore it) would stop the service. Only its stop function ends it.
// The Windows side itself (svc.IsWindowsService) cannot run here.
func TestAWindowsServiceWatchesNoSignal(t *testing.T) {
	was := inWindowsService
	inWindowsService = func() bool { return true }
	t.Cleanup(func() { inWindowsService = was })
	if got := List(); len(got) != 0 {
		t.Fatalf("List in a Windows service: %v, want none", got)
	}
	ctx, stop := NotifyContext(context.Background())
	defer stop()
	seen := make(chan os.Signal, 1)
	signal.Notify(seen, syscall.SIGWINCH)
	defer signal.Stop(seen)
	if err := syscall.Kill(os.Getpid(), syscall.SIGWINCH); err != nil {
		t.Fatal(err)
	}
	<-seen // delivered: a context watching every signal has it too
	select {
	case <-ctx.Done():
		t.Fatalf("a SIGWINCH ended the service's context: %v", context.Cause(ctx))
	case <-time.After(time.Second):
	}
	stop()
	if ctx.Err() == nil {
		t.Error("stop did not end the context")
	}
}
