package secretfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/internal/winacl"
)

// TestReadableByOthersReadsTheAccessList (Windows only, as the file's name
// says: it sets and reads a real access list): a file that Users may read
// is said to be, naming them; one that only SYSTEM and Administrators may
// read is not.
func TestReadableByOthersReadsTheAccessList(t *testing.T) {
	path := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(path, []byte("token: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	set := func(sddl string) {
		t.Helper()
		if err := winacl.Set(path, sddl); err != nil {
			t.Fatal(err)
		}
	}
	set("D:P(A;;FA;;;SY)(A;;FA;;;BA)(A;;0x1200a9;;;BU)")
	if who := ReadableByOthers(path); !strings.HasSuffix(who, "(read)") {
		t.Errorf("a file Users may read: ReadableByOthers = %q; want Users named, (read)", who)
	}
	set("D:P(A;;FA;;;SY)(A;;FA;;;BA)")
	if who := ReadableByOthers(path); who != "" {
		t.Errorf("a file only SYSTEM and Administrators may read: ReadableByOthers = %q; want none", who)
	}
}

// TestWritableByOthersReadsTheAccessList (Windows only): a folder that
// Users may add files to is said to be, naming them; one only SYSTEM and
// Administrators may change is not.
func TestWritableByOthersReadsTheAccessList(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := winacl.Set(dir, "D:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;;0x2;;;BU)"); err != nil {
		t.Fatal(err)
	}
	if who := WritableByOthers(dir); !strings.HasSuffix(who, "(add files)") {
		t.Errorf("a folder Users may add files to: WritableByOthers = %q; want Users named, (add files)", who)
	}
	if err := winacl.Set(dir, "D:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)"); err != nil {
		t.Fatal(err)
	}
	if who := WritableByOthers(dir); who != "" {
		t.Errorf("a folder only SYSTEM and Administrators may change: WritableByOthers = %q; want none", who)
	}
}
