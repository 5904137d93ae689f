//go:build unix

package acceptwait

import (
	"errors"
	"strconv"
	"syscall"
)

// shortage says what ran out when err is an accept's failure for want of
// file descriptors or memory, and is "" for any other error; files tells
// whether it was the process's own descriptors.
func shortage(err error, who string) (what string, files bool) {
	switch {
	case errors.Is(err, syscall.EMFILE):
		limit := "ulimit -n"
		if n, ok := fileLimit(); ok {
			limit = strconv.Itoa(n) + ": " + limit
		}
		return who + " has as many files open as its limit allows (" + limit + "; LimitNOFILE= of its systemd unit)", true
	case errors.Is(err, syscall.ENFILE):
		return "the host has as many files open as it allows (sysctl fs.file-max)", false
	case errors.Is(err, syscall.ENOBUFS), errors.Is(err, syscall.ENOMEM):
		return "the host is out of memory for connections", false
	}
	return "", false
}

// shortOfFiles reports whether err is the process's or the host's want of
// file descriptors.
func shortOfFiles(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// fileLimit is the process's limit of open files, and false when it has
// none worth keeping a reserve of.
func fileLimit() (int, bool) {
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) != nil || r.Cur > 1<<30 {
		return 0, false
	}
	return int(r.Cur), true
}
