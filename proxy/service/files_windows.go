package service

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/windows"

	"github.com/opsgate/opsgate/internal/winacl"
)

// LookupUser: a Windows service runs as LocalSystem here.
func LookupUser(name string) (*User, error) {
	return nil, errors.New("--user is for Linux; on Windows the service runs as LocalSystem")
}

func own(string, *User) error { return nil }

func ownGroup(string, *User) error { return nil }

// privateSDDL grants full control to SYSTEM and the Administrators group
// only, inherited by everything inside, and blocks what ProgramData would
// pass on (read access for every user): the config holds the token and key.
const privateSDDL = "D:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)"

// privateFileSDDL is the same for one file.
const privateFileSDDL = "D:P(A;;FA;;;SY)(A;;FA;;;BA)"

func protect(path string) error { return setDACL(path, privateSDDL) }

func protectFile(path string) error { return setDACL(path, privateFileSDDL) }

// mkdirPrivate makes the directory path private from its first moment:
// made, then protected, it would for a moment let every user add files and
// folders to it, as ProgramData does (a "state" folder of their own, say).
func mkdirPrivate(path string, _ os.FileMode) error {
	sd, err := windows.SecurityDescriptorFromString(privateSDDL)
	if err != nil {
		return fmt.Errorf("building the access list for %s: %w", path, err)
	}
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return &os.PathError{Op: "mkdir", Path: path, Err: err}
	}
	sa := windows.SecurityAttributes{Length: uint32(unsafe.Sizeof(windows.SecurityAttributes{})), SecurityDescriptor: sd}
	if err := windows.CreateDirectory(p, &sa); err != nil {
		return &os.PathError{Op: "mkdir", Path: path, Err: err}
	}
	return nil
}

// protectExisting makes the existing directory path private, as protect
// does, once it is sure an administrator made it. ProgramData lets every
// user make a folder, and owns it to them: a user who made
// %ProgramData%\NAME before install could, as its owner, open the access
// list again, or replace the config the service (LocalSystem) trusts with
// one that runs scripts of theirs. A directory that is a link or junction
// is refused too: the access list would be set on its target.
func protectExisting(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if fi.Mode()&(fs.ModeSymlink|fs.ModeIrregular) != 0 {
		return fmt.Errorf("%s is a link or junction, not a folder: remove it, then install again", path)
	}
	sd, err := windows.GetNamedSecurityInfo(path, windows.SE_FILE_OBJECT, windows.OWNER_SECURITY_INFORMATION)
	if err != nil {
		return fmt.Errorf("reading the owner of %s: %w", path, err)
	}
	owner, _, err := sd.Owner()
	if err != nil {
		return fmt.Errorf("reading the owner of %s: %w", path, err)
	}
	if !administrative(owner) {
		return fmt.Errorf("%s exists and belongs to %s, not to SYSTEM or Administrators, so someone other than an administrator made it: remove it, then install again",
			path, accountName(owner))
	}
	if err := protect(path); err != nil {
		return err
	}
	// Protected, the folder takes nothing new from other users; but while
	// it was open (an administrator made it inside ProgramData, whose
	// access list lets every user add folders), a user may have made
	// something in it, such as the "state" folder the service writes in.
	// protect changes no owner, nor an access list that inherits nothing,
	// so that is refused too.
	return filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == path {
			return err
		}
		if d.Type()&(fs.ModeSymlink|fs.ModeIrregular) != 0 {
			return fmt.Errorf("%s is a link or junction inside %s: remove it, then install again", p, path)
		}
		sd, err := windows.GetNamedSecurityInfo(p, windows.SE_FILE_OBJECT, windows.OWNER_SECURITY_INFORMATION)
		if err != nil {
			return fmt.Errorf("reading the owner of %s: %w", p, err)
		}
		owner, _, err := sd.Owner()
		if err != nil {
			return fmt.Errorf("reading the owner of %s: %w", p, err)
		}
		if !administrative(owner) {
			return fmt.Errorf("%s belongs to %s, not to SYSTEM or Administrators, so someone other than an administrator made it inside %s: remove it, then install again",
				p, accountName(owner), path)
		}
		return nil
	})
}

// administrative reports whether sid is SYSTEM, the Administrators group
// (the owner of what an elevated administrator makes) or the account this
// process runs as (install runs elevated: an administrator whose files a
// policy gives to their own account).
func administrative(sid *windows.SID) bool {
	if sid.IsWellKnown(windows.WinLocalSystemSid) || sid.IsWellKnown(windows.WinBuiltinAdministratorsSid) {
		return true
	}
	u, err := windows.GetCurrentProcessToken().GetTokenUser()
	return err == nil && sid.Equals(u.User.Sid)
}

// accountName is DOMAIN\account of sid, or the SID itself.
func accountName(sid *windows.SID) string {
	account, domain, _, err := sid.LookupAccount("")
	if err != nil {
		return sid.String()
	}
	if domain == "" {
		return account
	}
	return domain + `\` + account
}

func setDACL(path, sddl string) error {
	if err := winacl.Set(path, sddl); err != nil {
		return fmt.Errorf("restricting %s to SYSTEM and Administrators: %w", path, err)
	}
	return nil
}

// IsDirNotEmpty reports whether removing a directory failed because it
// holds files.
func IsDirNotEmpty(err error) bool {
	return errors.Is(err, windows.ERROR_DIR_NOT_EMPTY)
}

// CheckOwner: there is no --user on Windows.
func CheckOwner(string, *User) error { return nil }
