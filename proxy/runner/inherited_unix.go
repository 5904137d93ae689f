//go:build !windows

package runner

import (
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// KeepInheritedFromScripts marks close-on-exec every descriptor above
// stderr that this process inherited open across exec (what the shell or
// supervisor that started it leaked: a pipe, a log file), so that its
// scripts get only their stdin, stdout and stderr. What this process opens
// itself is close-on-exec already. The proxy calls it first thing; errors
// are ignored (a descriptor closed meanwhile).
func KeepInheritedFromScripts() {
	dir := "/dev/fd"
	if runtime.GOOS == "linux" {
		dir = "/proc/self/fd"
	}
	d, err := os.Open(dir)
	if err != nil {
		return
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	for _, name := range names {
		fd, err := strconv.Atoi(name)
		if err != nil || fd <= 2 {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC)
		}
	}
}
