package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/opsgate/opsgate/proxy/agent"
	"github.com/opsgate/opsgate/proxy/config"
)

// TestConfigChangedComparesTheFileWithWhatTheRunRead: status says the
// config changed after the running proxy read it only when the state file
// records the digest of that same file and the file now differs. A state
// file of an earlier proxy, which records no config, a run of another
// file, and a file status cannot read say nothing.
func TestConfigChangedComparesTheFileWithWhatTheRunRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "proxy.yaml")
	read := []byte("token: t\nkey: k\n")
	if err := os.WriteFile(path, read, 0o600); err != nil {
		t.Fatal(err)
	}
	run := agent.State{ConfigFile: path, ConfigSHA256: config.Digest(read)}
	if configChanged(run, path) {
		t.Errorf("the file the run read, unchanged: said changed")
	}
	if err := os.WriteFile(path, []byte("token: t2\nkey: k\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !configChanged(run, path) {
		t.Errorf("the file replaced after the run read it: not said changed")
	}

	// A state file written by a proxy before the config was recorded.
	older := filepath.Join(dir, agent.StateFileName)
	if err := os.WriteFile(older, []byte(`{"instance_id": "a", "pid": 42, "version": "v1", "started_at": "2026-12-01T10:00:00Z", "last_poll": "2026-12-01T10:00:05Z"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := agent.ReadState(older)
	if err != nil {
		t.Fatalf("an older state file: %v", err)
	}
	if configChanged(s, path) {
		t.Errorf("an older state file, which records no config: said changed")
	}
	if configChanged(agent.State{ConfigFile: filepath.Join(dir, "other.yaml"), ConfigSHA256: config.Digest(read)}, path) {
		t.Errorf("a run of another file: said changed")
	}
	if configChanged(agent.State{ConfigFile: filepath.Join(dir, "gone.yaml"), ConfigSHA256: config.Digest(read)}, filepath.Join(dir, "gone.yaml")) {
		t.Errorf("a file that cannot be read: said changed")
	}
}
