package service

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestUnitElsewhereFindsWhatSystemdWouldHaveOfThatName: on systemd,
// Install writes /etc/systemd/system/NAME.service, which overrides a unit
// of that name anywhere else (a package's, in /lib/systemd/system), and
// Uninstall disables it: so install must see such a unit, and the one
// systemd makes from an init script of that name.
func TestUnitElsewhereFindsWhatSystemdWouldHaveOfThatName(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	run, lib, initDir := filepath.Join(root, "run"), filepath.Join(root, "lib"), filepath.Join(root, "init.d")
	for _, d := range []string{run, lib, initDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dirs := []string{run, lib}
	if got := unitElsewhere("ssh", dirs, initDir); got != "" {
		t.Fatalf("no unit anywhere: %q, want none", got)
	}
	for _, p := range []string{filepath.Join(lib, "ssh.service"), filepath.Join(initDir, "cron")} {
		if err := os.WriteFile(p, []byte("theirs\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(lib, "ssh.service"), filepath.Join(run, "sshd.service")); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"ssh":  filepath.Join(lib, "ssh.service"),
		"sshd": filepath.Join(run, "sshd.service"),
		"cron": filepath.Join(initDir, "cron"),
		"sss":  "",
		"ssh.": "",
	} {
		if got := unitElsewhere(name, dirs, initDir); got != want {
			t.Errorf("unit %s: %q, want %q", name, got, want)
		}
	}
	// Its own directory is Query's: a unit there is the service itself.
	if slices.Contains(systemdUnitDirs, systemdUnitDir) {
		t.Errorf("systemdUnitDirs holds %s, where Install writes its unit", systemdUnitDir)
	}
}
