package winacl

import (
	"reflect"
	"testing"
)

const (
	authenticatedUsers = "S-1-5-11"
	users              = "S-1-5-32-545"
	bob                = "S-1-5-21-1004336348-1177238915-682003330-1001"
	self               = "S-1-5-21-1004336348-1177238915-682003330-500"
	appPackages        = "S-1-15-2-1"

	readExecute = 0x1200a9 // RX
	modify      = 0x1301bf // M
	full        = 0x1f01ff // F
)

// Access lists as Windows sets them on a fresh install (icacls), and what
// a folder made inside each inherits.
var (
	// C:\ itself: every authenticated user may make folders in it (AD),
	// and what they make inside lets them modify it (IO M).
	driveRoot = Descriptor{Owner: TrustedInstaller, DACL: []ACE{
		{Allow: true, SID: Administrators, Mask: full},
		{Allow: true, SID: System, Mask: full},
		{Allow: true, SID: users, Mask: readExecute},
		{Allow: true, SID: authenticatedUsers, Mask: modify, InheritOnly: true},
		{Allow: true, SID: authenticatedUsers, Mask: AppendData},
	}}
	// C:\scripts, made by an administrator: it inherits the root's.
	underDriveRoot = Descriptor{Owner: Administrators, DACL: []ACE{
		{Allow: true, SID: Administrators, Mask: full},
		{Allow: true, SID: System, Mask: full},
		{Allow: true, SID: users, Mask: readExecute},
		{Allow: true, SID: authenticatedUsers, Mask: modify},
		{Allow: true, SID: CreatorOwner, Mask: GenericAll, InheritOnly: true},
	}}
	// C:\ProgramData\opsgate\scripts, made by an administrator: Users
	// may add files and folders (WD, AD, WEA, WA on this folder and the
	// folders inside).
	underProgramData = Descriptor{Owner: Administrators, DACL: []ACE{
		{Allow: true, SID: System, Mask: full},
		{Allow: true, SID: Administrators, Mask: full},
		{Allow: true, SID: CreatorOwner, Mask: GenericAll, InheritOnly: true},
		{Allow: true, SID: users, Mask: readExecute},
		{Allow: true, SID: users, Mask: WriteData | AppendData | 0x10 | 0x100},
	}}
	// C:\Program Files\opsgate\scripts.
	underProgramFiles = Descriptor{Owner: TrustedInstaller, DACL: []ACE{
		{Allow: true, SID: TrustedInstaller, Mask: full},
		{Allow: true, SID: System, Mask: modify},
		{Allow: true, SID: Administrators, Mask: modify},
		{Allow: true, SID: users, Mask: readExecute},
		{Allow: true, SID: CreatorOwner, Mask: GenericAll, InheritOnly: true},
		{Allow: true, SID: appPackages, Mask: readExecute},
	}}
	// What the icacls line of docs/install-proxy.md leaves: inheritance
	// removed, SYSTEM and Administrators full control, Users read and
	// execute.
	asTheDocsSay = Descriptor{Owner: Administrators, DACL: []ACE{
		{Allow: true, SID: System, Mask: full},
		{Allow: true, SID: Administrators, Mask: full},
		{Allow: true, SID: users, Mask: readExecute},
	}}
)

func TestOthersOfTheAccessListsWindowsMakes(t *testing.T) {
	trusted := Trusted(self)
	for _, c := range []struct {
		name string
		d    Descriptor
		role Role
		want []Grant
	}{
		// Making a folder beside C:\scripts does not replace it.
		{`C:\ above C:\scripts`, driveRoot, Above, nil},
		{`C:\scripts`, underDriveRoot, Folder, []Grant{{SID: authenticatedUsers, Rights: []string{"add files", "delete"}}}},
		{`C:\ProgramData\opsgate\scripts`, underProgramData, Folder, []Grant{{SID: users, Rights: []string{"add files"}}}},
		{`C:\Program Files\opsgate\scripts`, underProgramFiles, Folder, nil},
		{`C:\Program Files\opsgate\scripts\run.ps1`, underProgramFiles, File, nil},
		{`C:\scripts after the docs' icacls`, asTheDocsSay, Folder, nil},
		{`C:\scripts\run.ps1 after the docs' icacls`, asTheDocsSay, File, nil},
		{"a config under the docs' icacls", asTheDocsSay, Secret, []Grant{{SID: users, Rights: []string{"read"}}}},
	} {
		if got := Others(c.d, c.role, trusted); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v; want %+v", c.name, got, c.want)
		}
	}
}

func TestOthersFollowsTheRulesOfAnAccessList(t *testing.T) {
	trusted := Trusted(self)
	for _, c := range []struct {
		name string
		d    Descriptor
		role Role
		want []Grant
	}{
		{"no access list: everyone may do everything", Descriptor{Owner: Administrators, NoDACL: true}, File,
			[]Grant{{SID: Everyone, Rights: []string{"write", "append", "delete", "change permissions", "take ownership"}}}},
		{"an empty access list: no one but the owner, trusted", Descriptor{Owner: Administrators}, File, nil},
		{"an entry for what is made inside only", Descriptor{Owner: Administrators, DACL: []ACE{
			{Allow: true, SID: users, Mask: full, InheritOnly: true}}}, Folder, nil},
		{"a deny before an allow of the same SID", Descriptor{Owner: Administrators, DACL: []ACE{
			{SID: users, Mask: WriteData | AppendData},
			{Allow: true, SID: users, Mask: modify}}}, File, []Grant{{SID: users, Rights: []string{"delete"}}}},
		{"a deny of Everyone covers every SID", Descriptor{Owner: Administrators, DACL: []ACE{
			{SID: Everyone, Mask: WriteData | AppendData | Delete},
			{Allow: true, SID: bob, Mask: modify}}}, File, nil},
		{"a deny after the allow does not take it back", Descriptor{Owner: Administrators, DACL: []ACE{
			{Allow: true, SID: bob, Mask: WriteData},
			{SID: bob, Mask: WriteData}}}, File, []Grant{{SID: bob, Rights: []string{"write"}}}},
		{"generic write is writing and appending", Descriptor{Owner: Administrators, DACL: []ACE{
			{Allow: true, SID: users, Mask: GenericWrite}}}, File, []Grant{{SID: users, Rights: []string{"write", "append"}}}},
		{"generic all is everything", Descriptor{Owner: Administrators, DACL: []ACE{
			{Allow: true, SID: bob, Mask: GenericAll}}}, Above, []Grant{{SID: bob, Rights: []string{"delete entries", "delete", "change permissions", "take ownership"}}}},
		{"generic read is reading", Descriptor{Owner: Administrators, DACL: []ACE{
			{Allow: true, SID: users, Mask: GenericRead}}}, Secret, []Grant{{SID: users, Rights: []string{"read"}}}},
		{"an owner who is not trusted may change the list", Descriptor{Owner: bob, DACL: []ACE{
			{Allow: true, SID: users, Mask: readExecute}}}, File, []Grant{{SID: bob, Rights: []string{"change permissions"}, AsOwner: true}}},
		{"unless OWNER RIGHTS says what the owner may", Descriptor{Owner: bob, DACL: []ACE{
			{Allow: true, SID: OwnerRights, Mask: readExecute}}}, File, nil},
		{"OWNER RIGHTS granting writes grants them to the owner", Descriptor{Owner: bob, DACL: []ACE{
			{Allow: true, SID: OwnerRights, Mask: WriteData}}}, File, []Grant{{SID: bob, Rights: []string{"write"}}}},
		{"the process's own account is trusted", Descriptor{Owner: self, DACL: []ACE{
			{Allow: true, SID: self, Mask: full}}}, Folder, nil},
		{"CREATOR OWNER on the file itself matches no one", Descriptor{Owner: Administrators, DACL: []ACE{
			{Allow: true, SID: CreatorOwner, Mask: full}}}, Folder, nil},
		{"a folder's add-folders alone is no way to add a script", Descriptor{Owner: Administrators, DACL: []ACE{
			{Allow: true, SID: users, Mask: AppendData}}}, Folder, nil},
		{"two entries of one SID are one grant", Descriptor{Owner: Administrators, DACL: []ACE{
			{Allow: true, SID: users, Mask: WriteData},
			{Allow: true, SID: bob, Mask: WriteDAC},
			{Allow: true, SID: users, Mask: DeleteChild}}}, Folder,
			[]Grant{{SID: users, Rights: []string{"add files", "delete entries"}}, {SID: bob, Rights: []string{"change permissions"}}}},
	} {
		if got := Others(c.d, c.role, trusted); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v; want %+v", c.name, got, c.want)
		}
	}
}

func TestDescribeNamesEachGrant(t *testing.T) {
	names := map[string]string{users: `BUILTIN\Users`}
	name := func(sid string) string {
		if n, ok := names[sid]; ok {
			return n
		}
		return sid
	}
	got := Describe([]Grant{{SID: users, Rights: []string{"add files", "delete"}}, {SID: bob, Rights: []string{"change permissions"}, AsOwner: true}}, name)
	want := `BUILTIN\Users (add files, delete), ` + bob + ` (change permissions, as its owner)`
	if got != want {
		t.Errorf("Describe = %q; want %q", got, want)
	}
}
