package runner

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// awaitExit returns once the child process pid has exited, leaving it
// unreaped, so that the Wait that follows returns at once. It waits in the
// runtime's poller, on a pidfd of the process, and so holds no thread of
// this process: Wait alone blocks one in waitid for as long as the script
// runs, a thread per running script, which at a limit of processes (ulimit
// -u, TasksMax=, pids.max: a thread counts as a process) the runtime may
// then fail to make, and a runtime that cannot make a thread aborts the
// whole proxy. Where pidfds are not to be had (a kernel before 5.4, a
// seccomp filter, no file descriptor left), it returns at once and the Wait
// blocks as before.
//
// The pid cannot have been reused: the caller has not reaped it yet.
func awaitExit(pid int) {
	fd, err := unix.PidfdOpen(pid, 0) // PIDFD_NONBLOCK would need Linux 5.10
	if err != nil {
		return
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd") // registered with the poller: a pidfd is readable once its process exited
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(fd uintptr) bool {
		for {
			var info unix.Siginfo // zeroed: a child not yet exited leaves it so (WNOHANG)
			err := unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			// Done once it exited, and on an error: the Wait then says
			// what it finds.
			return err != nil || info.Signo != 0
		}
	})
}
