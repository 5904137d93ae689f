package service

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Reach returns an error naming the first directory on the way to path
// that u cannot search, or path itself when u lacks want on it, by mode
// bits as the kernel checks them for u and its groups; a path with an
// access list is taken to allow it, and one that does not exist is left to
// the service. `install --user` checks what the service will need with it,
// rather than install a service that could only fail at every start.
func (u *User) Reach(path string, want Perm) error {
	return newReacher(u).reach(path, want)
}

// reacher is a user and its groups, for Reach.
type reacher struct {
	u      *User
	groups map[int]bool
}

func newReacher(u *User) reacher {
	r := reacher{u: u, groups: map[int]bool{u.GID: true}}
	if lu, err := user.Lookup(u.Name); err == nil {
		ids, _ := lu.GroupIds()
		for _, id := range ids {
			if gid, err := strconv.Atoi(id); err == nil {
				r.groups[gid] = true
			}
		}
	}
	return r
}

// allows reports whether the user has every permission of want on path,
// whose information is fi. A path with an access list is taken to allow
// it: the list may grant what the mode bits do not.
func (r reacher) allows(path string, fi os.FileInfo, want Perm) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || r.u.UID == 0 || hasACL(path) {
		return true
	}
	mode := uint32(fi.Mode().Perm())
	switch {
	case int(st.Uid) == r.u.UID:
		mode >>= 6
	case r.groups[int(st.Gid)]:
		mode >>= 3
	}
	return Perm(mode)&want == want
}

// reach returns an error naming the first directory on the way to path
// that the user cannot search, or path itself when the user lacks want on
// it. A path that does not exist is left to the service.
func (r reacher) reach(path string, want Perm) error {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil
	}
	dir := string(filepath.Separator)
	for _, part := range strings.Split(filepath.Dir(real), string(filepath.Separator)) {
		dir = filepath.Join(dir, part)
		fi, err := os.Stat(dir)
		if err != nil {
			return nil
		}
		if !r.allows(dir, fi, PermExecute) {
			return fmt.Errorf("%s cannot search %s (%s)", r.u.Name, dir, describeMode(fi))
		}
	}
	fi, err := os.Stat(real)
	if err != nil || r.allows(real, fi, want) {
		return nil
	}
	verb := "read"
	switch {
	case want&PermWrite != 0:
		verb = "write"
	case want&PermExecute != 0:
		verb = "execute"
	}
	return fmt.Errorf("%s cannot %s %s (%s)", r.u.Name, verb, path, describeMode(fi))
}

// hasACL reports whether path has a POSIX access list beyond its mode bits.
func hasACL(path string) bool {
	n, err := syscall.Getxattr(path, "system.posix_acl_access", nil)
	return err == nil && n > 0
}

func describeMode(fi os.FileInfo) string {
	owner := "?"
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		owner = strconv.Itoa(int(st.Uid))
		if u, err := user.LookupId(owner); err == nil {
			owner = u.Username
		}
	}
	return fmt.Sprintf("mode %04o, owner %s", fi.Mode().Perm(), owner)
}
