//go:build linux

package service

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// systemdUnits are the systemd units of the repository: the deploy example
// and the golden units `proxy install` writes (proxy/cli's tests keep both
// equal to what it renders).
func systemdUnits(t *testing.T) []string {
	t.Helper()
	units := []string{filepath.Join("..", "..", "deploy", "systemd", "proxy.service")}
	golden, err := filepath.Glob(filepath.Join("..", "..", "proxy", "cli", "testdata", "*.service"))
	if err != nil || len(golden) == 0 {
		t.Fatalf("no golden units in proxy/cli/testdata: %v", err)
	}
	return append(units, golden...)
}

// execLines are the Exec*= lines of a unit, each the command line without
// its key and systemd's prefixes (-, @, :, +, !).
func execLines(unit string) map[string][]string {
	lines := map[string][]string{}
	for _, l := range strings.Split(unit, "\n") {
		key, value, ok := strings.Cut(strings.TrimSpace(l), "=")
		if !ok || !strings.HasPrefix(key, "Exec") {
			continue
		}
		lines[key] = append(lines[key], strings.TrimLeft(value, "-@:+!"))
	}
	return lines
}

// TestSystemdUnitCommandsMatchTheCLI: every Exec*= line of the units runs
// the proxy with a verb and flags it accepts, by an absolute path; the
// unit's ExecStart is the service's `proxy --service NAME run`.
func TestSystemdUnitCommandsMatchTheCLI(t *testing.T) {
	t.Parallel()
	helps := cliHelps{}
	for _, path := range systemdUnits(t) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		execs := execLines(string(data))
		if len(execs["ExecStart"]) != 1 {
			t.Errorf("%s: %d ExecStart lines, want 1", path, len(execs["ExecStart"]))
		}
		for key, lines := range execs {
			for _, line := range lines {
				where := path + ": " + key
				if !filepath.IsAbs(strings.Fields(line)[0]) {
					t.Errorf("%s: %s does not run the proxy by an absolute path", where, line)
				}
				if n := helps.checkCLICalls(t, where, line); n != 1 {
					t.Errorf("%s: `%s` is %d proxy commands, want 1 (an unknown verb?)", where, line, n)
				}
				if key == "ExecStart" && !strings.Contains(line, " --service ") {
					t.Errorf("%s: `%s` is not `proxy --service NAME run ...`", where, line)
				}
			}
		}
	}
}

// TestSystemdUnitsPassSystemdAnalyzeVerify: `systemd-analyze verify`
// accepts each unit as it stands, with nothing to warn of. systemd need not
// run (it does not on the build machine): verify loads the unit from a
// root directory that holds it, the system's units it names (copied from
// this host's) and the proxy binary at its ExecStart path.
func TestSystemdUnitsPassSystemdAnalyzeVerify(t *testing.T) {
	t.Parallel()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian: apt-get install systemd): the units are not verified")
	}
	system := "/usr/lib/systemd/system"
	if _, err := os.Stat(filepath.Join(system, "multi-user.target")); err != nil {
		t.Skipf("no systemd units in %s to verify against: %v", system, err)
	}
	for _, path := range systemdUnits(t) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		root := t.TempDir()
		units := filepath.Join(root, "usr", "lib", "systemd")
		if err := os.MkdirAll(units, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("cp", "-a", system, units+"/").CombinedOutput(); err != nil {
			t.Fatalf("copying %s: %v: %s", system, err, out)
		}
		for _, line := range execLines(string(data))["ExecStart"] {
			exe := filepath.Join(root, strings.Fields(line)[0])
			if err := os.MkdirAll(filepath.Dir(exe), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Link(bin.proxy, exe); err != nil { // another file system
				copyFile(t, bin.proxy, exe, 0o755)
			}
		}
		unit := "/etc/systemd/system/" + filepath.Base(path)
		copyFile(t, path, filepath.Join(root, unit), 0o644)
		out, err := exec.Command(analyze, "verify", "--root="+root, unit).CombinedOutput()
		if err != nil || len(out) > 0 {
			t.Errorf("systemd-analyze verify %s (%s): %v\n%s", filepath.Base(path), path, err, out)
		}
	}
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
