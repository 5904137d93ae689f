package acceptwait

import (
	"errors"
	"syscall"
)

// Winsock's errors of an accept for want of sockets or buffers.
const (
	wsaEMFILE  = syscall.Errno(10024)
	wsaENOBUFS = syscall.Errno(10055)
)

// shortage says what ran out when err is an accept's failure for want of
// sockets or memory, and is "" for any other error.
func shortage(err error, who string) (what string, files bool) {
	switch {
	case errors.Is(err, wsaEMFILE):
		return who + " has as many sockets open as it may", false
	case errors.Is(err, wsaENOBUFS):
		return "the host is out of memory or buffers for connections", false
	}
	return "", false
}

// shortOfFiles reports whether err is the process's want of sockets.
func shortOfFiles(err error) bool { return errors.Is(err, wsaEMFILE) }

// fileLimit: Windows keeps no limit of open files worth a reserve.
func fileLimit() (int, bool) { return 0, false }
