package cli

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestScriptsDigestTellsWhetherTwoHostsRunTheSameScripts: `proxy status`
// shows a digest of the scripts a unit may name, so that a standby's
// scripts can be compared with the active instance's before a failover
// needs them. Two directories with the same scripts give the same digest
// whatever else they hold (a file that is not runnable, a subdirectory);
// a script changed, added, removed or renamed gives another.
func TestScriptsDigestTellsWhetherTwoHostsRunTheSameScripts(t *testing.T) {
	t.Parallel()
	ext := ".sh"
	if runtime.GOOS == "windows" {
		ext = ".cmd"
	}
	write := func(dir, name, body string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	scripts := func(files map[string]string) string {
		t.Helper()
		dir := t.TempDir()
		for name, body := range files {
			write(dir, name+ext, body, 0o755)
		}
		return dir
	}
	digest := func(dir string) (int, string) {
		t.Helper()
		n, d, err := scriptsDigest(dir)
		if err != nil {
			t.Fatal(err)
		}
		return n, d
	}
	base := map[string]string{"hello": "echo hello\n", "deploy": "echo deploy\n"}

	active := scripts(base)
	standby := scripts(base)
	write(standby, "README.txt", "notes, not a script\n", 0o644)
	if err := os.Mkdir(filepath.Join(standby, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	nA, dA := digest(active)
	nB, dB := digest(standby)
	if nA != 2 || nB != 2 || dA != dB {
		t.Fatalf("the same scripts: active %d %s, standby %d %s; want 2 scripts and one digest", nA, dA, nB, dB)
	}

	for what, files := range map[string]map[string]string{
		"a script changed": {"hello": "echo hello again\n", "deploy": "echo deploy\n"},
		"a script added":   {"hello": "echo hello\n", "deploy": "echo deploy\n", "extra": "true\n"},
		"a script missing": {"hello": "echo hello\n"},
		"a script renamed": {"hello": "echo hello\n", "deploy2": "echo deploy\n"},
	} {
		if _, d := digest(scripts(files)); d == dA {
			t.Errorf("%s: digest %s, the same as the active instance's", what, d)
		}
	}
}
