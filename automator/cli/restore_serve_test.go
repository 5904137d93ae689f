//go:build linux

package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/config"
)

// TestRestoreAndServeExcludeEachOther: restore is refused while a serve
// of the data directory runs, and a serve does not start while a restore
// holds the directory.
func TestRestoreAndServeExcludeEachOther(t *testing.T) {
	dir := initDir(t)
	file := filepath.Join(t.TempDir(), "b.db")
	if code, _, stderr := runCLI(t, "backup", "--data-dir", dir, file); code != 0 {
		t.Fatalf("backup: %s", stderr)
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen, cfg.HTTPListen = "127.0.0.1:0", "127.0.0.1:0"
	if err := config.Save(dir, cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan int, 1)
	log := &lockedBuffer{}
	go func() {
		done <- Main(ctx, []string{"serve", "--data-dir", dir}, Env{Stdout: &bytes.Buffer{}, Stderr: log})
	}()
	waitUntil(t, 15*time.Second, "serve to write serving.yaml", func() bool {
		_, ok, _ := config.ReadServing(dir)
		return ok
	})
	for _, args := range [][]string{{"restore", "--data-dir", dir, file}, {"restore", "--data-dir", dir, "--open-work-only"}} {
		code, _, stderr := runCLI(t, args...)
		if code != ExitError || !strings.Contains(stderr, "an automator serve or another command is using "+dir) {
			t.Errorf("%s while serve runs: exit %d, stderr %q; want %d and that serve runs", strings.Join(args, " "), code, stderr, ExitError)
		}
	}
	if matches, _ := filepath.Glob(cfg.DBPath(dir) + ".*"); len(matches) != 0 {
		t.Errorf("a refused restore left %v", matches)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exited %d:\n%s", code, log)
	}

	lock, err := lockForRestore(dir)
	if err != nil {
		t.Fatalf("taking the restore's lock once serve stopped: %v", err)
	}
	defer lock.Release()
	code, _, stderr := runCLI(t, "serve", "--data-dir", dir)
	if code != ExitError || !strings.Contains(stderr, "a restore is under way") {
		t.Errorf("serve during a restore: exit %d, stderr %q; want %d and that a restore is under way", code, stderr, ExitError)
	}
}
