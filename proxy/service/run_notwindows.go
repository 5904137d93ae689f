//go:build !windows

package service

import (
	"log/slog"

	"github.com/kardianos/service"
)

// managed: on Linux the --service flag is what says a service manager
// started the process (kardianos cannot tell inside a container).
func managed() bool { return true }

// systemLogger is syslog (which journald serves under systemd). It fails
// where there is no /dev/log, as in most containers.
func systemLogger(svc service.Service) (service.Logger, error) {
	return svc.SystemLogger(nil)
}

// watchEarlyExit: on unix RunWait returns when fn ends, and Run returns its
// error.
func watchEarlyExit(*program, *slog.Logger) {}
