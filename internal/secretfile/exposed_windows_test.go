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
