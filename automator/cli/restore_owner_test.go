//go:build linux

package cli

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/opsgate/opsgate/automator/config"
)

// TestRestoreByRootKeepsTheDataDirectoryOwnersFiles: an automator
// installed with --user runs as the owner of its data directory. A restore
// run by root must leave the database, and the serve lock it made, to that
// owner, or the service can no longer open them and does not start.
func TestRestoreByRootKeepsTheDataDirectoryOwnersFiles(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: files of another user")
	}
	const uid, gid = 65534, 65534 // nobody; no process runs as it here
	dir := initDir(t)
	backupFixture(t, dir)
	file := takeBackup(t, dir)
	if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	}); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(filepath.Join(dir, config.FileServeLock)) // made anew by root
	if code, _, stderr := runCLI(t, "restore", "--data-dir", dir, file); code != 0 {
		t.Fatalf("restore: %s", stderr)
	}
	cfg, _ := config.Load(dir)
	for _, path := range []string{cfg.DBPath(dir), filepath.Join(dir, config.FileServeLock)} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != uid || st.Gid != gid || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s after restore by root: owner %d:%d, mode %04o; want %d:%d, 0600 (the data directory's owner)", filepath.Base(path), st.Uid, st.Gid, fi.Mode().Perm(), uid, gid)
		}
	}
}

// TestCommandsByRootKeepTheServeLockTheOwners: a command run by root on
// the data directory of an automator installed with --user makes the
// serve lock, if missing, the directory owner's, or that serve could not
// open it and would not start.
func TestCommandsByRootKeepTheServeLockTheOwners(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: files of another user")
	}
	const uid, gid = 65534, 65534 // nobody; no process runs as it here
	dir := initDir(t)
	if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	}); err != nil {
		t.Fatal(err)
	}
	lockPath := filepath.Join(dir, config.FileServeLock)
	for _, args := range [][]string{{"account", "create", "acme"}, {"backup", filepath.Join(t.TempDir(), "b.db")}, {"cert", "renew"}} {
		_ = os.Remove(lockPath) // made anew by root
		if code, _, stderr := runCLI(t, append(args, "--data-dir", dir)...); code != 0 {
			t.Fatalf("%v: %s", args, stderr)
		}
		fi, err := os.Stat(lockPath)
		if err != nil {
			t.Fatalf("%v made no serve lock: %v", args, err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != uid || st.Gid != gid || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s after %v by root: owner %d:%d, mode %04o; want %d:%d, 0600 (the data directory's owner)", config.FileServeLock, args, st.Uid, st.Gid, fi.Mode().Perm(), uid, gid)
		}
	}
}
