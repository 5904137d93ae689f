//go:build !windows

package service

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// LookupUser finds a local user and its primary group.
func LookupUser(name string) (*User, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("user %q: %w; create it first, e.g. `useradd --system --no-create-home --shell /usr/sbin/nologin %s`", name, err, name)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return nil, fmt.Errorf("user %q: uid %q is not a number", name, u.Uid)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return nil, fmt.Errorf("user %q: gid %q is not a number", name, u.Gid)
	}
	group := u.Gid
	if g, err := user.LookupGroupId(u.Gid); err == nil {
		group = g.Name
	}
	return &User{Name: u.Username, Group: group, UID: uid, GID: gid}, nil
}

func own(path string, u *User) error {
	if u == nil {
		return nil
	}
	return os.Lchown(path, u.UID, u.GID)
}

func ownGroup(path string, u *User) error {
	return os.Lchown(path, -1, u.GID)
}

// protect and protectFile are for Windows access lists; on unix the mode
// says it all.
func protect(string) error { return nil }

func protectFile(string) error { return nil }

// mkdirPrivate is os.Mkdir: the mode makes the directory private.
func mkdirPrivate(path string, mode os.FileMode) error { return os.Mkdir(path, mode) }

// protectExisting has nothing to do either: only root makes directories in
// /etc.
func protectExisting(string) error { return nil }

// IsDirNotEmpty reports whether removing a directory failed because it
// holds files.
func IsDirNotEmpty(err error) bool {
	return errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST)
}

// CheckOwner refuses a directory that u does not own, which a service
// running as u could not write.
func CheckOwner(path string, u *User) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != u.UID {
		return fmt.Errorf("%s is not owned by %s; run `chown -R %s: %s` first", path, u.Name, u.Name, path)
	}
	return nil
}
