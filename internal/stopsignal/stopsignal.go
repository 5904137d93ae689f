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
