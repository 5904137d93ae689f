package config

import (
	"strings"
	"testing"
)

// TestStateDirMustBeAbsolute: a service's working directory is not the
// operator's, so a relative state_dir would land somewhere unexpected.
func TestStateDirMustBeAbsolute(t *testing.T) {
	c := Config{StateDir: "var/lib/proxy"}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "state_dir:") {
		t.Fatalf("relative state_dir: %v, want a state_dir error", err)
	}
	c.StateDir = t.TempDir()
	if err := c.Validate(); err != nil && strings.Contains(err.Error(), "state_dir:") {
		t.Fatalf("absolute state_dir refused: %v", err)
	}
	p := write(t, "state_dir: /var/lib/proxy\n")
	if c, err := Load(p); err != nil || c.StateDir != "/var/lib/proxy" {
		t.Fatalf("Load: %+v, %v", c, err)
	}
}
