package winacl

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestReadGivesTheAccessListInOrder (Windows only, as the file's name
// says: it reads real access lists): the entries of a folder's list come
// in their order, with their SIDs, masks and inherit-only flags, and its
// owner; a SID is named by its account.
func TestReadGivesTheAccessListInOrder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "scripts")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Set(dir, "D:P(D;;0x2;;;WD)(A;OICI;FA;;;SY)(A;OICIIO;FA;;;BA)(A;;0x6;;;BU)"); err != nil {
		t.Fatal(err)
	}
	d, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []ACE{
		{SID: Everyone, Mask: WriteData},
		{Allow: true, SID: System, Mask: fileAllAccess},
		{Allow: true, SID: Administrators, Mask: fileAllAccess, InheritOnly: true},
		{Allow: true, SID: "S-1-5-32-545", Mask: WriteData | AppendData},
	}
	if d.NoDACL || !reflect.DeepEqual(d.DACL, want) || d.Owner == "" {
		t.Fatalf("Read(%s) = %+v; want the owner and %+v", dir, d, want)
	}
	// BUILTIN\Users in English; the names are the system language's.
	if got := Name("S-1-5-32-545"); got == "S-1-5-32-545" || !strings.Contains(got, `\`) {
		t.Errorf("Name of Users = %q; want DOMAIN\\account", got)
	}
}
