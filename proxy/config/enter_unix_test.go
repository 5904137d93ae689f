//go:build !windows

package config

import (
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/opsgate/opsgate/crypto"
)

// enterChildEnv, set, makes TestAScriptsDirThisUserCannotEnterIsRefused
// validate a config of the scripts_dir it names and print the outcome: the
// test run again as an unprivileged user.
const enterChildEnv = "OPSGATE_TEST_VALIDATE_SCRIPTS_DIR"

// TestAScriptsDirThisUserCannotEnterIsRefused: a scripts_dir that exists
// but that the proxy's user may not enter (root's, mode 0700, and the proxy
// run as another user) is refused at start, naming scripts_dir. It was
// accepted: the proxy polled, claimed units and failed each one ("unknown
// script ...: permission denied"), while @ping said it was fine, taking
// its share of an active/active group's units from the instances that
// could run them. As root the check runs in a copy of this test run as
// nobody.
func TestAScriptsDirThisUserCannotEnterIsRefused(t *testing.T) {
	if dir := os.Getenv(enterChildEnv); dir != "" {
		key, err := crypto.NewKey(1)
		if err != nil {
			t.Fatal(err)
		}
		c := Config{AutomatorURL: "http://127.0.0.1:1", Token: "t", Key: key.String(), ScriptsDir: dir,
			InstanceID: "a", MaxConcurrency: 4, MaxOutputBytes: 1 << 20}
		os.Stdout.WriteString("validate: " + strings.ReplaceAll(errString(c.Validate()), "\n", "; ") + "\n")
		return
	}
	t.Parallel()
	dir := t.TempDir()
	scripts := filepath.Join(dir, "scripts")
	if err := os.Mkdir(scripts, 0o700); err != nil {
		t.Fatal(err)
	}
	var got string
	if os.Geteuid() != 0 {
		if err := os.Chmod(scripts, 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(scripts, 0o700) })
		got = errString((Config{ScriptsDir: scripts}).Validate())
	} else {
		got = validateAsNobody(t, dir, scripts)
	}
	if !strings.Contains(got, "scripts_dir: ") || !strings.Contains(got, "may not enter it") {
		t.Fatalf("a scripts_dir the proxy's user may not enter: %q, want it refused naming scripts_dir", got)
	}
	// One it may enter passes.
	if err := os.Chmod(scripts, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := errString((Config{ScriptsDir: scripts}).Validate()); strings.Contains(got, "scripts_dir") {
		t.Fatalf("a scripts_dir the user may enter: %q, want scripts_dir accepted", got)
	}
}

// validateAsNobody runs this test again as the user nobody, in a copy of
// the test binary that nobody can run, on scripts (root's, mode 0700, in
// dir), and returns what Validate said there.
func validateAsNobody(t *testing.T, dir, scripts string) string {
	t.Helper()
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	// nobody must reach the copy of the binary and the scripts directory's
	// parent (the test's temporary directories are made for it), and may
	// not enter the directory.
	for d := dir; strings.HasPrefix(d, os.TempDir()+string(filepath.Separator)); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for d := os.TempDir(); ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm()&0o001 == 0 {
			t.Skipf("nobody may not enter %s, on the way to the test's files", d)
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	bin := filepath.Join(dir, "config.test")
	if err := copyFile(os.Args[0], bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestAScriptsDirThisUserCannotEnterIsRefused$", "-test.count=1")
	cmd.Env = append(os.Environ(), enterChildEnv+"="+scripts)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the test run as nobody: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "validate: "); ok {
			return v
		}
	}
	t.Fatalf("the test run as nobody said nothing of Validate:\n%s", out)
	return ""
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func copyFile(from, to string, mode os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
