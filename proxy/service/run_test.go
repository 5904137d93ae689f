package service

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/logtest"
	"github.com/opsgate/opsgate/internal/waittest"
)

// TestRunStopsOnTheSamePathAsCtrlC: cancelling ctx (what SIGTERM does in
// main) stops the service by cancelling fn's context; Run returns fn's
// result once fn is done.
func TestRunStopsOnTheSamePathAsCtrlC(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	finished := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, RunOptions{Name: "svc-test", StopTimeout: 10 * time.Second, Stderr: io.Discard},
			func(ctx context.Context, _ io.Writer) error {
				close(started)
				<-ctx.Done()
				close(finished) // the graceful part of the shutdown
				return nil
			})
	}()
	waittest.Recv(t, started, "the service's function to start") // Start returned and fn runs
	select {
	case err := <-errc:
		t.Fatalf("Run returned before the stop: %v", err)
	default:
	}
	cancel()
	if err := waittest.Recv(t, errc, "Run to return once its context was cancelled"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	select {
	case <-finished:
	default:
		t.Fatal("Run returned before fn finished its shutdown")
	}
}

// TestRunStopIsBounded: a function that ignores the stop does not keep the
// service from ending; Run says so.
func TestRunStopIsBounded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	started := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, RunOptions{Name: "svc-test", StopTimeout: 50 * time.Millisecond, Stderr: io.Discard},
			func(context.Context, io.Writer) error {
				close(started)
				<-release
				return nil
			})
	}()
	waittest.Recv(t, started, "the service's function to start")
	cancel()
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "did not stop within 50ms") {
			t.Fatalf("Run: %v, want a stop timeout", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return within its bound")
	}
}

// TestRunEndsWithTheErrorOfAFunctionThatQuits: a service whose work ends
// on its own exits with the error, so the service manager restarts it.
func TestRunEndsWithTheErrorOfAFunctionThatQuits(t *testing.T) {
	boom := errors.New("invalid proxy config")
	var log logtest.Buffer
	err := Run(context.Background(), RunOptions{Name: "svc-test", Stderr: &log},
		func(_ context.Context, w io.Writer) error {
			io.WriteString(w, "level=ERROR msg=bad\n")
			return boom
		})
	if !errors.Is(err, boom) {
		t.Fatalf("Run: %v, want %v", err, boom)
	}
}

func TestRunRefusesABadName(t *testing.T) {
	err := Run(context.Background(), RunOptions{Name: "../x", Stderr: io.Discard}, func(context.Context, io.Writer) error { return nil })
	if err == nil {
		t.Fatal("Run accepted a bad name")
	}
}
