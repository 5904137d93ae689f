//go:build !windows

package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestASecretPrintedToAFileOthersMayReadIsRestricted: `account create`
// sent to a file every user may read (a shell's umask 022 made it) makes
// that file readable by its owner only before the profile is written, and
// says so on stderr (a review: the token and key were left readable by
// every user, without a word); to a file only its owner may read it says
// nothing.
func TestASecretPrintedToAFileOthersMayReadIsRestricted(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	for _, tc := range []struct {
		name      string
		mode      os.FileMode
		wantMode  os.FileMode
		wantNotes bool
	}{
		{"every user", 0o644, 0o600, true},
		{"its owner", 0o600, 0o600, false},
	} {
		path := filepath.Join(t.TempDir(), "proxy.yaml")
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Chmod(tc.mode); err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		name := "acme-" + strings.ReplaceAll(tc.name, " ", "-")
		code := Main(t.Context(), []string{"account", "create", name, "--data-dir", dir}, Env{Stdout: f, Stderr: &stderr})
		f.Close()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(path)
		noted := strings.Contains(stderr.String(), "stdout is a file every user may read (mode -rw-r--r--), "+path+", and it receives the account's profile, with its token: made it mode -rw-------, readable by its owner only")
		if code != 0 || fi.Mode().Perm() != tc.wantMode || noted != tc.wantNotes || !strings.Contains(string(data), "token: ") {
			t.Errorf("account create to a file readable by %s: exit %d, mode %v, noted %v, stderr %q; want exit 0, mode %v, noted %v, the profile written",
				tc.name, code, fi.Mode().Perm(), noted, stderr.String(), tc.wantMode, tc.wantNotes)
		}
	}
}
