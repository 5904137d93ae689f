//go:build linux

package cli_test

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/cli"
	"github.com/opsgate/opsgate/internal/waittest"
)

// TestExecInterruptedWhileReadingStdinReturns: Ctrl-C while exec reads
// --stdin - (a terminal, a producer that has not finished) ends exec at
// once, queueing nothing. main catches SIGINT (signal.NotifyContext), so
// nothing else ends the process.
func TestExecInterruptedWhileReadingStdinReturns(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	pr, pw := io.Pipe()
	defer pw.Close()
	ctx, interrupt := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var errb bytes.Buffer
	go func() {
		done <- cli.Main(ctx,
			[]string{"exec", "--server", a.URL(), "--api-key-file", a.APIKeyFile, "--ca", a.CAFile, "--account", "acme", "--stdin", "-", "x.sh"},
			cli.Env{Stdin: pr, Stdout: &bytes.Buffer{}, Stderr: &errb})
	}()
	time.Sleep(200 * time.Millisecond)
	interrupt()
	select {
	case code := <-done:
		if code == 0 {
			t.Errorf("exec interrupted while reading stdin: exit 0")
		}
	case <-time.After(5 * time.Second):
		pw.Close() // let exec go, so the test ends
		code := waittest.Recv(t, done, "exec to return once its stdin ended")
		t.Fatalf("exec did not return within 5 s of Ctrl-C while reading --stdin -; it returned %d only when its stdin ended", code)
	}
	if n := a.CountWork(t); n != 0 {
		t.Errorf("%d units queued by an exec interrupted before it submitted", n)
	}
}
