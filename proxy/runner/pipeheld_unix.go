//go:build !windows

package runner

import (
	"os"

	"golang.org/x/sys/unix"
)

// otherEndHeld reports whether a process holds the other end of the pipe
// whose end f is: a writer of a read end (no POLLHUP yet), a reader of a
// write end (no POLLERR). It is true when it cannot tell.
func otherEndHeld(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false // closed already: nothing to cut off
	}
	held := true
	_ = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			_, err := unix.Poll(fds, 0)
			if err == unix.EINTR {
				continue
			}
			if err == nil {
				held = fds[0].Revents&(unix.POLLHUP|unix.POLLERR) == 0
			}
			return
		}
	})
	return held
}
