package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/internal/winacl"
)

// setDACL gives path the access list of sddl, inheriting nothing.
func setDACL(t *testing.T, path, sddl string) {
	t.Helper()
	if err := winacl.Set(path, sddl); err != nil {
		t.Fatal(err)
	}
}

// TestScriptsFolderWritableByUsersIsListed (Windows only, as the file's
// name says: it sets and reads real access lists): a scripts folder whose
// access list lets Users add files, and a script in it that Users may
// write, are listed, naming who and what; with the list the docs' icacls
// line sets, neither is. The folders above the test's temporary folder
// are the machine's, so only these two paths are looked at.
func TestScriptsFolderWritableByUsersIsListed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "scripts")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "run.ps1")
	if err := os.WriteFile(script, []byte("Write-Output ok\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	entryOf := func(found []string, path string) string {
		for _, f := range found {
			if strings.HasPrefix(f, path+": ") {
				return f
			}
		}
		return ""
	}
	const private = "D:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;0x1200a9;;;BU)"
	setDACL(t, dir, "D:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;0x1200a9;;;BU)(A;;0x2;;;BU)")
	setDACL(t, script, "D:P(A;;FA;;;SY)(A;;FA;;;BA)(A;;0x120116;;;BU)")
	found := writableByOthers(dir)
	if e := entryOf(found, real); !strings.Contains(e, "(add files)") {
		t.Errorf("the scripts folder that Users may add files to: %q in %q", e, found)
	}
	if e := entryOf(found, filepath.Join(real, "run.ps1")); !strings.Contains(e, "(write, append)") {
		t.Errorf("the script that Users may write: %q in %q", e, found)
	}

	setDACL(t, dir, private)
	setDACL(t, script, "D:P(A;;FA;;;SY)(A;;FA;;;BA)(A;;0x1200a9;;;BU)")
	found = writableByOthers(dir)
	for _, p := range []string{real, filepath.Join(real, "run.ps1")} {
		if e := entryOf(found, p); e != "" {
			t.Errorf("restricted as the docs say, %s is still listed: %q", p, e)
		}
	}
}
