//go:build unix

package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunRefusesAConfigThatIsNotARegularFile: `proxy run --config` of a
// FIFO with no writer is refused at once, in one line naming the path and
// what it is, rather than blocking in its open, where SIGTERM (the service
// manager's stop) could not end it.
func TestRunRefusesAConfigThatIsNotARegularFile(t *testing.T) {
	t.Parallel()
	fifo := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- Main(t.Context(), []string{"run", "--config", fifo, "--scripts-dir", t.TempDir()}, Env{Stdout: &stdout, Stderr: &stderr})
	}()
	var code int
	select {
	case code = <-done:
	case <-time.After(10 * time.Second):
		unblockUntil(fifo, done)
		t.Fatalf("proxy run --config FIFO was still opening it after 10 s; want it refused before any open")
	}
	msg := stderr.String()
	if code == 0 || !strings.Contains(msg, fifo) || !strings.Contains(msg, "not a regular file") || strings.Count(msg, "\n") != 1 {
		t.Errorf("proxy run --config FIFO: exit %d, stderr %q; want it refused in one line naming the path, as not a regular file", code, msg)
	}
}

// unblockUntil lets whatever blocks opening the FIFO at path go on, again
// and again, until done delivers: a writer that comes and goes ends each
// such open (an open of a FIFO for reading and writing does not block).
func unblockUntil(path string, done <-chan int) {
	for {
		if f, err := os.OpenFile(path, os.O_RDWR, 0); err == nil {
			f.Close()
		}
		select {
		case <-done:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}
