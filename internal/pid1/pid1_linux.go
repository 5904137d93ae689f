package pid1

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// forwarded are the signals passed on to the program: those a container
// runtime, a terminal or an operator sends to stop or tell it something.
var forwarded = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// Run, in a process that is PID 1, runs the program again (the same
// executable, arguments and environment) as its only direct child, passes
// it the signals above, waits for every process that ends up its child and
// returns the program's exit code (128 plus the signal that killed it), with
// true. Outside PID 1 it does nothing and returns false: the caller goes on
// as the program.
//
// The program runs in a process group of its own, made the terminal's
// foreground group when there is a terminal (docker run -it): a Ctrl+C
// reaches it once, from the terminal, not a second time from here.
func Run() (int, bool) {
	if os.Getpid() != 1 {
		return 0, false
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: running as PID 1, it cannot find its own executable to run under it: %v\n", os.Args[0], err)
		return 1, true
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	attr := &syscall.SysProcAttr{Setpgid: true}
	start := func() (int, error) {
		return syscall.ForkExec(exe, os.Args, &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}, Sys: attr})
	}
	var child int
	err = syscall.ENOTTY
	if _, terr := unix.IoctlGetTermios(0, unix.TCGETS); terr == nil {
		attr.Foreground, attr.Ctty = true, 0
		child, err = start()
	}
	if err != nil {
		// No terminal, or one that is not this session's, which fails
		// the child's tcsetpgrp: it runs as without one.
		attr.Foreground = false
		child, err = start()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: running as PID 1, it cannot start itself under it: %v\n", os.Args[0], err)
		return 1, true
	}
	go func() {
		for s := range sigs {
			_ = syscall.Kill(child, s.(syscall.Signal))
		}
	}()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: running as PID 1, waiting for its processes: %v\n", os.Args[0], err)
			return 1, true
		}
		if pid != child {
			continue // an orphan, reaped
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal()), true
		}
		return ws.ExitStatus(), true
	}
}
