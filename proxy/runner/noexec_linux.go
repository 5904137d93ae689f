package runner

import "golang.org/x/sys/unix"

// OnNoExec reports whether path is on a file system mounted noexec, from
// which the system runs no program (exec and access(X_OK) fail with
// EACCES, whatever the file's mode).
func OnNoExec(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Flags&unix.ST_NOEXEC != 0
}
