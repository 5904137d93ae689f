package cli

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store/pgstore"
	"github.com/opsgate/opsgate/proxy/service"
)

// Access a service's user needs, as mode bits.
const (
	permRead    = 4
	permWrite   = 2
	permExecute = 1
)

// reacher tells what a user may do with a file by its mode bits, as the
// kernel does for that user and its groups (access lists aside): `install
// --user` checks what the service will need before installing a service
// that could only fail at every start.
type reacher struct {
	u      *service.User
	groups map[int]bool
}

func newReacher(u *service.User) reacher {
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
func (r reacher) allows(path string, fi os.FileInfo, want uint32) bool {
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
	return mode&want == want
}

// reach returns an error naming the first directory on the way to path
// that the user cannot search, or path itself when the user lacks want on
// it. A path that does not exist is left to the service.
func (r reacher) reach(path string, want uint32) error {
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
		if !r.allows(dir, fi, permExecute) {
			return fmt.Errorf("%s cannot search %s (%s)", r.u.Name, dir, describeMode(fi))
		}
	}
	fi, err := os.Stat(real)
	if err != nil || r.allows(real, fi, want) {
		return nil
	}
	verb := "read"
	switch {
	case want&permWrite != 0:
		verb = "write"
	case want&permExecute != 0:
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

// checkServiceUserReach refuses a service user who could not run exe or
// serve the data directory dir: every directory on their way searchable,
// exe executable, the files serve reads readable and the directory and a
// SQLite database writable.
func checkServiceUserReach(u *service.User, exe, dir string, cfg config.Config) error {
	r := newReacher(u)
	if err := r.reach(exe, permExecute); err != nil {
		return fmt.Errorf("%w: the service runs %s; install from a copy of the binary that %s can run (such as /usr/local/bin/automator)", err, exe, u.Name)
	}
	if err := r.reach(dir, permRead|permWrite|permExecute); err != nil {
		if !strings.Contains(err.Error(), "cannot search") {
			return fmt.Errorf("%w; run `chown -R %s: %s` first", err, u.Name, dir)
		}
		return fmt.Errorf("%w, so the service could not open %s; move the data directory where %s can reach it (such as under /var/lib)", err, dir, u.Name)
	}
	files := []string{config.FileConfig, config.FileMasterKey, config.FileCert, config.FileKey, config.FileCACert}
	for _, f := range files {
		if err := r.reach(filepath.Join(dir, f), permRead); err != nil {
			return fmt.Errorf("%w; run `chown -R %s: %s` first", err, u.Name, dir)
		}
	}
	if !pgstore.IsDSN(cfg.DB) {
		db := cfg.DBPath(dir)
		for _, p := range []string{db, db + "-wal", db + "-shm"} {
			if err := r.reach(p, permRead|permWrite); err != nil {
				return fmt.Errorf("%w; run `chown -R %s: %s` first", err, u.Name, filepath.Dir(db))
			}
		}
	}
	return nil
}
