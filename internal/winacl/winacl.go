// Package winacl says, from a Windows file's owner and access list, who
// beyond the trusted may change it or read it: what the mode bits say on
// Linux (internal/secretfile, the proxy's check of scripts_dir). The
// decision is plain Go over a description of the security descriptor, so
// it is tested on every OS; reading a real descriptor is Windows code of
// its callers (Read, in read_windows.go).
package winacl

import (
	"slices"
	"strings"
)

// Access rights of files and directories (winnt.h): a directory's
// FILE_ADD_FILE is a file's FILE_WRITE_DATA, and so on.
const (
	ReadData        = 0x1 // FILE_READ_DATA, FILE_LIST_DIRECTORY
	WriteData       = 0x2 // FILE_WRITE_DATA, FILE_ADD_FILE
	AppendData      = 0x4 // FILE_APPEND_DATA, FILE_ADD_SUBDIRECTORY
	DeleteChild     = 0x40
	Delete          = 0x10000
	WriteDAC        = 0x40000
	WriteOwner      = 0x80000
	GenericAll      = 0x10000000
	GenericWrite    = 0x40000000
	GenericRead     = 0x80000000
	fileAllAccess   = 0x1f01ff
	fileGenericRead = 0x120089
	// fileGenericWrite is FILE_GENERIC_WRITE: write and append data,
	// attributes and extended attributes, READ_CONTROL, SYNCHRONIZE.
	fileGenericWrite = 0x120116
)

// Well-known SIDs.
const (
	Everyone         = "S-1-1-0"
	CreatorOwner     = "S-1-3-0"
	OwnerRights      = "S-1-3-4"
	System           = "S-1-5-18"
	Administrators   = "S-1-5-32-544"
	TrustedInstaller = "S-1-5-80-956008885-3418522649-1831038044-1853292631-2271478464"
)

// ACE is one entry of an access list, in the list's order.
type ACE struct {
	// Allow is an allowing entry; false, a denying one.
	Allow bool
	SID   string
	Mask  uint32
	// InheritOnly entries apply to what is made inside a directory, not
	// to the directory itself.
	InheritOnly bool
}

// Descriptor is what of a file's security descriptor decides who may do
// what with it.
type Descriptor struct {
	Owner string
	// NoDACL: the file has no access list at all (or a null one), which
	// lets everyone do everything.
	NoDACL bool
	DACL   []ACE
}

// Role is what a path is to its caller, which decides what access to it
// matters.
type Role int

const (
	// Folder is a directory whose entries choose what runs (scripts_dir,
	// a directory holding a script): adding an entry, deleting or
	// renaming one, changing its access list or owner, or removing it.
	Folder Role = iota
	// Above is a directory above such a folder: only what replaces the
	// path below it matters, deleting or renaming an entry (its
	// FILE_DELETE_CHILD), changing its access list or owner, or removing
	// it. Making a new folder or file beside it does not (the root of a
	// drive lets every authenticated user do that).
	Above
	// File is a file whose content decides what runs (a script): writing
	// or appending to it, changing its access list or owner, or removing
	// it.
	File
	// Secret is a file that holds a secret: reading it, or changing its
	// access list or owner (then reading it).
	Secret
)

// matters are the rights that matter for each role.
var matters = map[Role]uint32{
	Folder: WriteData | DeleteChild | Delete | WriteDAC | WriteOwner,
	Above:  DeleteChild | Delete | WriteDAC | WriteOwner,
	File:   WriteData | AppendData | Delete | WriteDAC | WriteOwner,
	Secret: ReadData | WriteDAC | WriteOwner,
}

// Grant is who (a SID) may do what (the rights that matter, named).
type Grant struct {
	SID    string
	Rights []string
	// AsOwner: the rights come from owning the file, not from its list.
	AsOwner bool
}

// Others returns who, beyond trusted, may do what matters for role with
// the file d describes, in the order the list names them. trusted says
// whether a SID is trusted (SYSTEM, Administrators, TrustedInstaller and
// the account the process runs as, say: Trusted).
//
// A denying entry takes its rights from the allowing entries after it
// for the same SID, or for every SID when it is Everyone's; a deny of a
// group a SID may belong to is not followed (the groups of a SID are not
// known here), so a right so denied may still be listed. An owner who is
// not trusted may always change the access list (unless an OWNER RIGHTS
// entry says what the owner may).
func Others(d Descriptor, role Role, trusted func(sid string) bool) []Grant {
	want := matters[role]
	if d.NoDACL {
		return []Grant{{SID: Everyone, Rights: names(want, role)}}
	}
	denied := map[string]uint32{}
	var order []string
	got := map[string]uint32{}
	ownerRights := false
	for _, e := range d.DACL {
		if e.InheritOnly {
			continue
		}
		m := expand(e.Mask)
		sid := e.SID
		if sid == OwnerRights {
			ownerRights = true
			sid = d.Owner
		}
		if !e.Allow {
			denied[sid] |= m
			continue
		}
		if sid == CreatorOwner || trusted(sid) {
			// CREATOR OWNER names the maker of what is made inside:
			// on the file itself it matches no one.
			continue
		}
		m &^= denied[sid] | denied[Everyone]
		if m&want == 0 {
			continue
		}
		if _, seen := got[sid]; !seen {
			order = append(order, sid)
		}
		got[sid] |= m & want
	}
	var out []Grant
	for _, sid := range order {
		out = append(out, Grant{SID: sid, Rights: names(got[sid], role)})
	}
	if !ownerRights && d.Owner != "" && !trusted(d.Owner) && got[d.Owner]&WriteDAC == 0 {
		out = append(out, Grant{SID: d.Owner, Rights: names(WriteDAC, role), AsOwner: true})
	}
	return out
}

// expand turns the generic rights of a mask into the file rights they
// stand for.
func expand(m uint32) uint32 {
	if m&GenericAll != 0 {
		m |= fileAllAccess
	}
	if m&GenericWrite != 0 {
		m |= fileGenericWrite
	}
	if m&GenericRead != 0 {
		m |= fileGenericRead
	}
	return m &^ (GenericAll | GenericWrite | GenericRead)
}

// names names the rights of m as they are to a path of role.
func names(m uint32, role Role) []string {
	dir := role == Folder || role == Above
	var out []string
	add := func(bit uint32, file, folder string) {
		if m&bit != 0 {
			if dir {
				out = append(out, folder)
			} else {
				out = append(out, file)
			}
		}
	}
	add(ReadData, "read", "list")
	add(WriteData, "write", "add files")
	add(AppendData, "append", "add folders")
	add(DeleteChild, "delete entries", "delete entries")
	add(Delete, "delete", "delete")
	add(WriteDAC, "change permissions", "change permissions")
	add(WriteOwner, "take ownership", "take ownership")
	return out
}

// Trusted returns the usual trust: SYSTEM, Administrators,
// TrustedInstaller, and the SIDs of self (the account the process runs
// as; "" for none).
func Trusted(self ...string) func(string) bool {
	return func(sid string) bool {
		return sid == System || sid == Administrators || sid == TrustedInstaller ||
			(sid != "" && slices.Contains(self, sid))
	}
}

// Describe says grants as a line: "BUILTIN\Users (add files),
// DOMAIN\bob (change permissions, as its owner)", naming each SID with
// name (which may return the SID itself).
func Describe(grants []Grant, name func(sid string) string) string {
	parts := make([]string, 0, len(grants))
	for _, g := range grants {
		rights := strings.Join(g.Rights, ", ")
		if g.AsOwner {
			rights += ", as its owner"
		}
		parts = append(parts, name(g.SID)+" ("+rights+")")
	}
	return strings.Join(parts, ", ")
}
