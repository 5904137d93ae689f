// Package logtest checks what a command of the automator or the proxy
// logs: the service logs of both programs are read the same way in their
// tests.
//
// Only tests import it (test/deps checks that).
package logtest

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
)

// RequireNoSystemLog skips a test that reads a service's log on its
// stderr where a system log (/dev/log) would take it instead.
func RequireNoSystemLog(t testing.TB) {
	t.Helper()
	if _, err := os.Stat("/dev/log"); err == nil {
		t.Skip("a system log (/dev/log) takes the service's log here, not its stderr")
	}
}

// AssertJSONLines fails unless log has at least min lines, each a JSON
// object.
func AssertJSONLines(t testing.TB, log string, min int) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(log, "\n"), "\n")
	if log == "" || len(lines) < min {
		t.Fatalf("log %q: want at least %d lines", log, min)
	}
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Errorf("a line that is not JSON: %q", l)
		}
	}
}

// Buffer is a log's destination that goroutines write to while the test
// reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
