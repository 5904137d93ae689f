package service

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// fakeSCM is a Windows service as the control manager shows it: a state
// that moves on by one step of next at each query.
type fakeSCM struct {
	mu     sync.Mutex
	state  scmState
	next   []scmState // the states the following queries find, in order
	stops  int        // stop requests accepted
	starts int
	refuse map[scmState]error // sendStop's answer in a state
}

func (f *fakeSCM) query() (scmState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.next) > 0 {
		f.state, f.next = f.next[0], f.next[1:]
	}
	return f.state, nil
}

func (f *fakeSCM) sendStop() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.refuse[f.state]; err != nil {
		return err
	}
	f.stops++
	f.state = scmStopPending
	if len(f.next) == 0 {
		f.next = []scmState{scmStopPending, scmStopped}
	}
	return nil
}

func (f *fakeSCM) start() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state != scmStopped {
		return errSCMAlreadyRunning
	}
	f.starts++
	f.state = scmRunning
	return nil
}

// windowsRefusals are the control manager's answers to a stop request.
var windowsRefusals = map[scmState]error{
	scmStopped:      errSCMNotActive,
	scmStartPending: errSCMCannotAccept,
	scmStopPending:  errSCMCannotAccept,
}

func shortSCMPoll(t *testing.T) {
	old := scmPoll
	scmPoll = time.Millisecond
	t.Cleanup(func() { scmPoll = old })
}

// TestStopOfAStoppingWindowsServiceWaitsUntilItStopped: a second stop
// during a graceful stop is not an error ("cannot accept control messages")
// but waits, as the first one does, until the service has stopped.
func TestStopOfAStoppingWindowsServiceWaitsUntilItStopped(t *testing.T) {
	shortSCMPoll(t)
	f := &fakeSCM{state: scmStopPending, next: []scmState{scmStopPending, scmStopPending, scmStopped}, refuse: windowsRefusals}
	if err := scmStopAndWait(f); err != nil {
		t.Fatalf("stop of a stopping service: %v", err)
	}
	if f.state != scmStopped {
		t.Fatalf("stop returned in state %d, before the service stopped", f.state)
	}
}

// TestStopOfAStartingWindowsServiceStopsItOnceItRuns: a service still
// starting cannot take a stop request; it is asked again once it runs.
func TestStopOfAStartingWindowsServiceStopsItOnceItRuns(t *testing.T) {
	shortSCMPoll(t)
	f := &fakeSCM{state: scmStartPending, next: []scmState{scmStartPending, scmRunning}, refuse: windowsRefusals}
	if err := scmStopAndWait(f); err != nil {
		t.Fatalf("stop of a starting service: %v", err)
	}
	if f.stops != 1 || f.state != scmStopped {
		t.Fatalf("%d stop requests accepted, state %d; want 1, stopped", f.stops, f.state)
	}
}

// TestStopOfAStoppedWindowsServiceSucceeds, as for systemctl.
func TestStopOfAStoppedWindowsServiceSucceeds(t *testing.T) {
	f := &fakeSCM{state: scmStopped, refuse: windowsRefusals}
	if err := scmStopAndWait(f); err != nil || f.stops != 0 {
		t.Fatalf("stop of a stopped service: %v, %d stops", err, f.stops)
	}
}

// TestStopOfARunningWindowsServiceWaitsUntilItStopped.
func TestStopOfARunningWindowsServiceWaitsUntilItStopped(t *testing.T) {
	shortSCMPoll(t)
	f := &fakeSCM{state: scmRunning, refuse: windowsRefusals}
	if err := scmStopAndWait(f); err != nil || f.state != scmStopped {
		t.Fatalf("stop: %v, state %d", err, f.state)
	}
}

// TestStopPassesOtherWindowsErrorsOn.
func TestStopPassesOtherWindowsErrorsOn(t *testing.T) {
	denied := errors.New("access is denied")
	f := &fakeSCM{state: scmRunning, refuse: map[scmState]error{scmRunning: denied}}
	if err := scmStopAndWait(f); !errors.Is(err, denied) {
		t.Fatalf("stop: %v, want %v", err, denied)
	}
}

// TestStartOfAStoppingWindowsServiceStartsItAgainOnceStopped: started
// while it stops, the control manager would call the service running and
// do nothing; it is started again once it has stopped.
func TestStartOfAStoppingWindowsServiceStartsItAgainOnceStopped(t *testing.T) {
	shortSCMPoll(t)
	f := &fakeSCM{state: scmStopPending, next: []scmState{scmStopPending, scmStopPending, scmStopped}}
	if err := scmStart(f); err != nil {
		t.Fatalf("start of a stopping service: %v", err)
	}
	if f.starts != 1 || f.state != scmRunning {
		t.Fatalf("%d starts, state %d; want 1, running", f.starts, f.state)
	}
}

// TestStartOfARunningWindowsServiceSucceeds, changing nothing.
func TestStartOfARunningWindowsServiceSucceeds(t *testing.T) {
	f := &fakeSCM{state: scmRunning}
	if err := scmStart(f); err != nil || f.starts != 0 {
		t.Fatalf("start of a running service: %v, %d starts", err, f.starts)
	}
}

// TestAStoppingWindowsServiceIsReportedAsStopping: status says a service
// in SERVICE_STOP_PENDING is stopping, not stopped.
func TestAStoppingWindowsServiceIsReportedAsStopping(t *testing.T) {
	for st, want := range map[scmState]struct {
		running bool
		detail  string
	}{
		scmStopped: {false, ""}, scmStopPending: {false, DetailStopping}, scmStartPending: {true, "starting"}, scmRunning: {true, ""},
	} {
		if running, detail := scmRuns(st); running != want.running || detail != want.detail {
			t.Errorf("state %d: running %v (%q), want %v (%q)", st, running, detail, want.running, want.detail)
		}
	}
}
