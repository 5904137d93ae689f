//go:build linux

package cli_test

import (
	"bytes"
	"context"
	"io"
	"sync"
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
	reading := make(chan struct{})
	stdin := &firstReadSignal{r: pr, reading: reading}
	ctx, interrupt := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var errb bytes.Buffer
	go func() {
		done <- cli.Main(ctx,
			[]string{"exec", "--server", a.URL(), "--api-key-file", a.APIKeyFile, "--ca", a.CAFile, "--account", "acme", "--stdin", "-", "x.sh"},
			cli.Env{Stdin: stdin, Stdout: &bytes.Buffer{}, Stderr: &errb})
	}()
	// Ctrl-C once exec is blocked reading its stdin, not before it got there.
	waittest.Recv(t, reading, "exec to read its --stdin -")
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

// firstReadSignal closes reading when its first Read begins: the reader
// of stdin has reached the read that blocks.
type firstReadSignal struct {
	r       io.Reader
	once    sync.Once
	reading chan struct{}
}

func (f *firstReadSignal) Read(p []byte) (int, error) {
	f.once.Do(func() { close(f.reading) })
	return f.r.Read(p)
}
