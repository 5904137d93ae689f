//go:build unix

package clihelp

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// TestOneLineStoppedNamesARealSignal: the cause signal.NotifyContext
// gives its context is itself context.Canceled for errors.Is, yet names
// the signal, and is said so.
func TestOneLineStoppedNamesARealSignal(t *testing.T) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	<-ctx.Done()
	err := fmt.Errorf("waiting for work w_1: %w", context.Canceled)
	if got := OneLineStopped(ctx, err); got != "waiting for work w_1: stopped: interrupt signal received" {
		t.Errorf("a context ended by an interrupt: %q", got)
	}
}
