package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLimitsLoadFromYAMLAndDefaultWhenLeftOut(t *testing.T) {
	dir := t.TempDir()
	c := Default("https://h:1")
	if err := Save(dir, c); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(dir, FileConfig))
	if strings.Contains(string(data), "limits") {
		t.Errorf("init writes a limits section although every limit is the default:\n%s", data)
	}
	data = append(data, []byte("limits:\n  max_stdin: 4096\n  max_queued_per_account: 50\n  failed_auth_refill: 10s\n")...)
	if err := os.WriteFile(filepath.Join(dir, FileConfig), data, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := Limits{MaxStdin: 4096, MaxQueuedPerAccount: 50, FailedAuthRefill: 10 * time.Second}
	if got.Limits != want {
		t.Fatalf("limits = %+v, want %+v", got.Limits, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestLimitsOutOfBoundsAreNamed(t *testing.T) {
	c := Default("https://h:1")
	c.Limits = Limits{MaxScriptName: 256, MaxArgs: -1, MaxArgsBytes: 2 << 20, MaxEnv: 5000, MaxEnvBytes: -5,
		MaxStdin: MaxMessage, MaxQueuedPerAccount: -1, FailedAuthBurst: -1, FailedAuthRefill: 2 * time.Hour}
	err := c.Validate()
	for _, key := range []string{"max_script_name", "max_args:", "max_args_bytes", "max_env:", "max_env_bytes", "max_stdin",
		"max_queued_per_account", "failed_auth_burst", "failed_auth_refill"} {
		if err == nil || !strings.Contains(err.Error(), "limits."+key) {
			t.Errorf("Validate does not name limits.%s: %v", key, err)
		}
	}
	// A misspelt key is refused, naming it.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, FileConfig), []byte("limits:\n  max_stdin_bytes: 5\n"), 0o644)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "max_stdin_bytes") {
		t.Fatalf("unknown limit: %v, want it named", err)
	}
}
