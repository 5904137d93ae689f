package service

import (
	"log/slog"
	"os"

	"github.com/kardianos/service"
)

// managed: the Service Control Manager started this process. Run by hand
// in a console, Run runs the function directly.
func managed() bool { return !service.Interactive() }

// systemLogger is the Event Log (source <name>, registered by Install) when
// running under the Service Control Manager; nil (stderr) when run by hand.
func systemLogger(svc service.Service) (service.Logger, error) {
	if service.Interactive() {
		return nil, nil
	}
	return svc.SystemLogger(nil)
}

// watchEarlyExit ends the process when fn returns without a stop request:
// kardianos has no way to report it to the control manager, and an exit
// with an error code lets the recovery actions restart the service.
func watchEarlyExit(p *program, log *slog.Logger) {
	if service.Interactive() {
		return
	}
	go func() {
		<-p.done
		if p.stopping.Load() {
			return
		}
		// fn logged its error, if it had one.
		log.Error("the service ended without a stop request; exiting, for its recovery actions to start it again", "service", p.name)
		os.Exit(1)
	}()
}
