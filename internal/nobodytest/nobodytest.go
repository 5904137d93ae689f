//go:build !windows

// Package nobodytest runs a test again as the unprivileged user nobody,
// for what root's privileges would hide (a directory it may not enter, a
// file it may not run): the test, run as root, makes its files, and its
// copy, run as nobody, does the part that needs an ordinary user and
// prints what it found.
package nobodytest

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Run runs the test named test (the current test binary's) as nobody,
// with env added to its environment, from a copy of the binary in dir, a
// directory under os.TempDir that the test made (more than one Run may
// share it): dir and the directories above it up to os.TempDir are made
// enterable by everyone. It returns
// what the copy wrote, and fails t if it failed. It skips t where there is
// no user nobody or nobody may not reach os.TempDir.
func Run(t testing.TB, dir, test string, env ...string) string {
	t.Helper()
	uid, gid := IDs(t)
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
	bin := filepath.Join(dir, filepath.Base(os.Args[0])+".nobody")
	if err := copyFile(os.Args[0], bin, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		t.Fatal(err) // made already by an earlier Run of the test
	}
	cmd := exec.Command(bin, "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the test run as nobody: %v\n%s", err, out)
	}
	return string(out)
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

// IDs returns the user and group ids of nobody, or skips t where there is
// no such user.
func IDs(t testing.TB) (uid, gid int) {
	t.Helper()
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid
}
