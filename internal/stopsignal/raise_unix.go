//go:build unix

package stopsignal

import (
	"os"
	"os/signal"
	"syscall"
	"time"
)

// raise ends the process by signal s, as its default action does: a shell
// tells a command killed by SIGINT from one that exited (it stops a script
// that ran it, too). It returns only if s did not end the process within
// a second.
func raise(s os.Signal) {
	n, ok := s.(syscall.Signal)
	if !ok {
		return
	}
	signal.Reset(s)
	_ = syscall.Kill(os.Getpid(), n)
	time.Sleep(time.Second)
}
