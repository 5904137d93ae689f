//go:build unix

package config

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLoadRefusesAConfigThatIsNotARegularFile: an automator.yaml that is a
// FIFO with no writer is refused at once, naming the path and what it is,
// rather than blocking the command (serve, under a service manager's stop)
// in its open.
func TestLoadRefusesAConfigThatIsNotARegularFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, FileConfig)
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	unblock := func() {
		if f, err := os.OpenFile(fifo, os.O_RDWR, 0); err == nil {
			f.Close()
		}
	}
	t.Cleanup(unblock)
	done := make(chan error, 1)
	go func() { _, err := Load(dir); done <- err }()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		for {
			unblock()
			select {
			case <-done:
				t.Fatalf("Load of a FIFO automator.yaml was still opening it after 10 s; want it refused before any open")
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	if err == nil || !strings.Contains(err.Error(), fifo) || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Load of a FIFO automator.yaml: %v; want it refused, naming the path, as not a regular file", err)
	}
}
