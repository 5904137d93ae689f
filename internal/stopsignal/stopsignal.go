// Package stopsignal names the signals that ask a command of the automator
// or the proxy to stop (serve and run stop gracefully, exec cancels its
// unit).
package stopsignal

import (
	"os"
	"os/signal"
	"syscall"
)

// List is the interrupt (Ctrl-C), SIGTERM (a service manager's stop) and
// SIGHUP (the terminal closed: an SSH session dropped), unless the
// process was started with SIGHUP ignored (nohup), which it then stays:
// handling it would end a command its operator meant to outlive the
// terminal.
func List() []os.Signal {
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}

// Stopping is called once the first signal of List has come, with the
// stop function of the signal.NotifyContext that watched for them: a
// second interrupt or SIGTERM then ends the process at once, as their
// default does. A second SIGHUP does not: a closed terminal sends more
// than one (the shell passes its own on to its jobs, and the kernel sends
// the foreground group another when the shell exits), and it would kill
// the command while it stops (exec cancelling its unit). It is ignored
// from then on.
func Stopping(stop func()) {
	signal.Ignore(syscall.SIGHUP)
	stop()
}
