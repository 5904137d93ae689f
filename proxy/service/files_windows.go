package service

import (
	"errors"
	"fmt"

	"golang.org/x/sys/windows"
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

func setDACL(path, sddl string) error {
	sd, err := windows.SecurityDescriptorFromString(sddl)
	if err != nil {
		return fmt.Errorf("building the access list for %s: %w", path, err)
	}
	dacl, _, err := sd.DACL()
	if err != nil {
		return fmt.Errorf("building the access list for %s: %w", path, err)
	}
	err = windows.SetNamedSecurityInfo(path, windows.SE_FILE_OBJECT,
		windows.DACL_SECURITY_INFORMATION|windows.PROTECTED_DACL_SECURITY_INFORMATION, nil, nil, dacl, nil)
	if err != nil {
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
