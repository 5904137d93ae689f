package config

import (
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/crypto"
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

// TestAPathHoldingANULByteSaysSo: a NUL byte in scripts_dir or state_dir
// (a config written by a tool that ends its strings with one, or a "\0"
// escape) is named as such, the path quoted: the system's own error
// ("stat /opt/scripts: invalid argument", the NUL unseen in a terminal)
// names a path that looks right.
func TestAPathHoldingANULByteSaysSo(t *testing.T) {
	scripts := t.TempDir()
	key, err := crypto.NewKey(1)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		field string
		set   func(*Config)
	}{
		{"scripts_dir", func(c *Config) { c.ScriptsDir = scripts + "\x00" }},
		{"state_dir", func(c *Config) { c.StateDir = scripts + "\x00/state" }},
	} {
		c := Config{AutomatorURL: "http://127.0.0.1:1", Token: "t", Key: key.String(), ScriptsDir: scripts,
			InstanceID: "a", MaxConcurrency: 4, MaxOutputBytes: 1 << 20, GracePeriod: 30 * time.Second}
		tc.set(&c)
		err := c.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), tc.field+": ") || strings.ContainsRune(err.Error(), 0) || !strings.Contains(err.Error(), `\x00`) || !strings.Contains(err.Error(), "NUL byte") {
			t.Errorf("%s holding a NUL byte: %q; want one error naming %s, the NUL byte, and the path quoted", tc.field, err, tc.field)
		}
	}
}
