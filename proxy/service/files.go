package service

import (
	"errors"
	"fmt"
	"os"
)

// User is the account a Linux service runs as (install --user).
type User struct {
	Name, Group string
	UID, GID    int
}

// Perm is access a service's user needs, as mode bits.
type Perm uint32

// The permissions Reach checks.
const (
	PermRead    Perm = 4
	PermWrite   Perm = 2
	PermExecute Perm = 1
)

// MakeDir makes the directory path (its parent must exist) for a service's
// files, owned by u when given, and on Windows readable only by SYSTEM and
// Administrators (private) or inheriting from ProgramData. It reports whether
// it made the directory. An existing directory is left as it is, except that
// a private one on Windows is made private again, and refused when someone
// other than an administrator made it (protectExisting).
func MakeDir(path string, mode os.FileMode, u *User, private bool) (created bool, err error) {
	if private {
		err = mkdirPrivate(path, mode)
	} else {
		err = os.Mkdir(path, mode)
	}
	if errors.Is(err, os.ErrExist) {
		fi, serr := os.Stat(path)
		if serr != nil {
			return false, serr
		}
		if !fi.IsDir() {
			return false, fmt.Errorf("%s exists and is not a directory", path)
		}
		if private {
			return false, protectExisting(path)
		}
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := os.Chmod(path, mode); err != nil { // the umask may have cut it
		return true, err
	}
	if err := own(path, u); err != nil {
		return true, err
	}
	if private {
		if err := protect(path); err != nil {
			return true, err
		}
	}
	return true, nil
}

// WriteNewFile writes a file that must not exist yet, with mode, owned by
// root (Linux) and group u.Group when u is given, so the service's user can
// read it but not change it. A private file is on Windows readable by SYSTEM
// and Administrators only, whatever its folder lets others do.
func WriteNewFile(path string, data []byte, mode os.FileMode, u *User, private bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(path)
		return err
	}
	if err := os.Chmod(path, mode); err != nil {
		return err
	}
	if private {
		if err := protectFile(path); err != nil {
			return err
		}
	}
	if u != nil {
		return ownGroup(path, u)
	}
	return nil
}
