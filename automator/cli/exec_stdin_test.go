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
	t.Parallel()
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

// TestExecRefusesAnEmptyStdinFlag: --stdin "" (a script's variable left
// empty) is refused in one line, exit 255, with nothing queued, rather
// than taken for no stdin and the script run without what it was meant
// to read.
func TestExecRefusesAnEmptyStdinFlag(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	var out, errb bytes.Buffer
	code := cli.Main(t.Context(),
		[]string{"exec", "--server", a.URL(), "--api-key-file", a.APIKeyFile, "--ca", a.CAFile, "--account", "acme", "--timeout", "1s", "--stdin", "", "x.sh"},
		cli.Env{Stdin: &bytes.Buffer{}, Stdout: &out, Stderr: &errb})
	want := "automator: --stdin is empty; give a FILE, or - for this process's stdin (leave it out for none)\n"
	if code != cli.ExitError || errb.String() != want || out.Len() != 0 {
		t.Errorf("exec --stdin \"\": exit %d, stdout %q, stderr %q; want %d and %q", code, out.String(), errb.String(), cli.ExitError, want)
	}
	if n := a.CountWork(t); n != 0 {
		t.Errorf("%d units queued by an exec refused", n)
	}
}
