package service

import (
	"errors"
	"fmt"
	"time"
)

// The Service Control Manager's side of start, stop and status on Windows,
// kept portable so that it is tested on every OS with a fake service
// (control_windows.go hands it the real one).

// scmState is a Windows service's state, as the control manager reports it
// (SERVICE_STOPPED = 1, ...).
type scmState uint32

const (
	scmStopped scmState = 1 + iota
	scmStartPending
	scmStopPending
	scmRunning
)

// The control manager's refusals that start and stop act on.
var (
	// errSCMNotActive: a stop of a service that does not run
	// (ERROR_SERVICE_NOT_ACTIVE).
	errSCMNotActive = errors.New("the service has not been started")
	// errSCMCannotAccept: a stop while the service is starting or already
	// stopping (ERROR_SERVICE_CANNOT_ACCEPT_CTRL).
	errSCMCannotAccept = errors.New("the service cannot accept control messages at this time")
	// errSCMAlreadyRunning: a start of a service that is not stopped
	// (ERROR_SERVICE_ALREADY_RUNNING).
	errSCMAlreadyRunning = errors.New("an instance of the service is already running")
)

// scmService is what start and stop need of one Windows service.
type scmService interface {
	query() (scmState, error)
	sendStop() error
	start() error
}

// scmPoll is how often start and stop look at a service that is changing
// state; a variable so tests can shorten it.
var scmPoll = 100 * time.Millisecond

// DetailStopping is Status.Detail of a Windows service whose stop has begun
// and which finishes its running work (SERVICE_STOP_PENDING): Running is
// false, as it takes no new work.
const DetailStopping = "stopping: finishing its running work"

// scmRuns says whether a service in state st runs, and what is unusual
// about it.
func scmRuns(st scmState) (bool, string) {
	switch st {
	case scmStopped:
		return false, ""
	case scmStopPending:
		return false, DetailStopping
	case scmStartPending:
		return true, "starting"
	case scmRunning:
		return true, ""
	}
	return true, fmt.Sprintf("service state %d", st)
}

// scmStopAndWait asks s to stop and waits until it has stopped. A service
// that does not run is stopped already. One that cannot take the request
// yet is waited for: one already stopping until it has stopped (a second
// `proxy stop` during a graceful stop waits too, as systemctl does), one
// still starting until it runs, then asked again.
func scmStopAndWait(s scmService) error {
	for {
		err := s.sendStop()
		switch {
		case errors.Is(err, errSCMNotActive):
			return nil
		case err != nil && !errors.Is(err, errSCMCannotAccept):
			return err
		}
		refused := err != nil
		for {
			st, err := s.query()
			if err != nil {
				return err
			}
			if st == scmStopped {
				return nil
			}
			time.Sleep(scmPoll)
			if refused && st != scmStartPending && st != scmStopPending {
				break // it can take the request now
			}
		}
	}
}

// scmStart starts s. A service still stopping is waited for first, then
// started again (as systemctl start does with a unit that is stopping):
// started at once, the control manager would call it running and do
// nothing, and it would be gone a moment later. A service that runs is
// started.
func scmStart(s scmService) error {
	for {
		st, err := s.query()
		if err != nil {
			return err
		}
		if st != scmStopPending {
			break
		}
		time.Sleep(scmPoll)
	}
	if err := s.start(); err != nil && !errors.Is(err, errSCMAlreadyRunning) {
		return err
	}
	return nil
}
