//go:build linux

package cli

import (
	"bytes"
	"crypto/tls"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/opsgate/opsgate/automator/config"
)

// TestCertRenewByRootKeepsTheDataDirectoryOwnersFiles: an automator
// installed with --user runs as the owner of its data directory. A
// `cert renew` run by root must leave server.key and server.pem to that
// owner, with their modes, or the automator cannot read the renewed key:
// the reload fails and the next start fails.
func TestCertRenewByRootKeepsTheDataDirectoryOwnersFiles(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root: files of another user")
	}
	const uid, gid = 65534, 65534 // nobody; no process runs as it here
	dir := initDir(t)
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := Main(t.Context(), []string{"cert", "renew", "--data-dir", dir}, Env{Stdout: &out, Stderr: &errb}); code != 0 {
		t.Fatalf("cert renew: exit %d: %s", code, errb.String())
	}
	for name, mode := range map[string]os.FileMode{config.FileKey: 0o600, config.FileCert: 0o644} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != uid || st.Gid != gid || fi.Mode().Perm() != mode {
			t.Errorf("%s after cert renew by root: owner %d:%d, mode %04o; want %d:%d, %04o (the data directory's owner)", name, st.Uid, st.Gid, fi.Mode().Perm(), uid, gid, mode)
		}
	}
	if _, err := tls.LoadX509KeyPair(filepath.Join(dir, config.FileCert), filepath.Join(dir, config.FileKey)); err != nil {
		t.Errorf("the renewed pair does not load: %v", err)
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, "*.renew")); len(leftovers) > 0 {
		t.Errorf("cert renew left %v behind", leftovers)
	}
}
