//go:build !windows

package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/crypto"
)

// TestRunWarnsOfAScriptsDirOthersMayWrite: a scripts directory every user
// may write to is not refused (the operator may mean it), but `proxy run`
// says at start, at WARN, that others may change what it runs, naming the
// directory; a tidy one gets no such line.
func TestRunWarnsOfAScriptsDirOthersMayWrite(t *testing.T) {
	t.Parallel()
	scripts := filepath.Join(t.TempDir(), "scripts")
	if err := os.Mkdir(scripts, 0o755); err != nil {
		t.Fatal(err)
	}
	key, err := crypto.NewKey(1)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(path, []byte("automator_url: http://127.0.0.1:1\ntoken: opt_x\nkey: "+key.String()+"\nscripts_dir: '"+scripts+"'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // the agent starts only to stop
	run := func() string {
		var stdout, stderr bytes.Buffer
		if code := Main(ctx, []string{"run", "--config", path}, Env{Stdout: &stdout, Stderr: &stderr}); code != 0 {
			t.Fatalf("proxy run: exit %d, %s", code, stderr.String())
		}
		return stderr.String()
	}
	if log := run(); strings.Contains(log, "may change what this proxy runs") {
		t.Errorf("a tidy scripts directory: the log warns of it:\n%s", log)
	}
	if err := os.Chmod(scripts, 0o777); err != nil {
		t.Fatal(err)
	}
	if log := run(); !strings.Contains(log, "level=WARN msg=\"users other than the scripts' owners may change what this proxy runs") ||
		!strings.Contains(log, scripts+": writable by every user") {
		t.Errorf("a scripts directory every user may write: want a WARN naming it:\n%s", log)
	}
}
