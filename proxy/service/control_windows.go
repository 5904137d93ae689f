package service

import (
	"errors"
	"fmt"
	"time"

	"github.com/kardianos/service"
	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc"
	"golang.org/x/sys/windows/svc/mgr"
)

const platformWindows = "windows-service"

func chooseSystem() {}

func checkPlatformSpec(s Spec) error {
	if s.User != "" {
		return errors.New("--user is for Linux; on Windows the service runs as LocalSystem (change the account in services.msc)")
	}
	return nil
}

// definition asks the control manager whether service name exists, with
// the least access that tells (kardianos's Status asks for the right to
// start and stop it too, which a user who is not an administrator lacks,
// so that `status` failed for them with "Access is denied").
func definition(_ service.Service, name string) (string, bool, error) {
	key := `HKLM\SYSTEM\CurrentControlSet\Services\` + name
	_, done, err := openSCMService(name, windows.SERVICE_QUERY_STATUS)
	switch {
	case errors.Is(err, windows.ERROR_SERVICE_DOES_NOT_EXIST):
		return key, false, nil
	case err != nil:
		return key, false, err
	}
	done()
	return key, true, nil
}

// definitionText is the command line the control manager starts service
// name with.
func definitionText(name, _ string) (string, error) {
	s, done, err := openSCMService(name, windows.SERVICE_QUERY_CONFIG)
	if err != nil {
		return "", err
	}
	defer done()
	c, err := s.s.Config()
	if err != nil {
		return "", fmt.Errorf("reading the configuration of service %s: %w", name, err)
	}
	return c.BinaryPathName, nil
}

// running asks the control manager itself: kardianos calls a service that
// is stopping (SERVICE_STOP_PENDING, finishing its running work) stopped.
func running(_ service.Service, name string) (bool, string, error) {
	s, done, err := openSCMService(name, windows.SERVICE_QUERY_STATUS)
	if err != nil {
		return false, "", err
	}
	defer done()
	st, err := s.query()
	if err != nil {
		return false, "", err
	}
	r, detail := scmRuns(st)
	return r, detail, nil
}

func bootStart(name string) bool {
	m, err := mgr.Connect()
	if err != nil {
		return false
	}
	defer m.Disconnect()
	s, err := m.OpenService(name)
	if err != nil {
		return false
	}
	defer s.Close()
	c, err := s.Config()
	return err == nil && c.StartType == mgr.StartAutomatic
}

// start starts the service (scmStart): one that runs already is started,
// as for systemctl and the SysV script; one still stopping is started
// again once it has stopped.
func start(_ service.Service, name string) error {
	s, done, err := openSCMService(name, windows.SERVICE_QUERY_STATUS|windows.SERVICE_START)
	if err != nil {
		return err
	}
	defer done()
	return scmStart(s)
}

// stop stops the service and waits until it has stopped (scmStopAndWait);
// one that does not run is stopped, as for systemctl and the SysV script,
// and one already stopping is waited for.
func stop(_ service.Service, name string) error {
	s, done, err := openSCMService(name, windows.SERVICE_QUERY_STATUS|windows.SERVICE_STOP)
	if err != nil {
		return err
	}
	defer done()
	return scmStopAndWait(s)
}

// scmHandle is a service opened with the control manager, as start, stop
// and status need it.
type scmHandle struct{ s *mgr.Service }

// openSCMService opens service name with access only (mgr.Connect would
// ask for full access to the control manager, which status does not need).
func openSCMService(name string, access uint32) (scmHandle, func(), error) {
	m, err := windows.OpenSCManager(nil, nil, windows.SC_MANAGER_CONNECT)
	if err != nil {
		return scmHandle{}, nil, fmt.Errorf("connecting to the service control manager: %w", err)
	}
	n, err := windows.UTF16PtrFromString(name)
	if err != nil {
		_ = windows.CloseServiceHandle(m)
		return scmHandle{}, nil, err
	}
	h, err := windows.OpenService(m, n, access)
	if err != nil {
		_ = windows.CloseServiceHandle(m)
		return scmHandle{}, nil, fmt.Errorf("opening service %s: %w", name, err)
	}
	s := &mgr.Service{Name: name, Handle: h}
	return scmHandle{s}, func() { _ = s.Close(); _ = windows.CloseServiceHandle(m) }, nil
}

func (h scmHandle) query() (scmState, error) {
	st, err := h.s.Query()
	if err != nil {
		return 0, err
	}
	return scmState(st.State), nil
}

func (h scmHandle) sendStop() error {
	_, err := h.s.Control(svc.Stop)
	return scmError(err)
}

func (h scmHandle) start() error { return scmError(h.s.Start()) }

// scmError turns the control manager's refusals that start and stop act on
// into their portable sentinels.
func scmError(err error) error {
	switch {
	case errors.Is(err, windows.ERROR_SERVICE_NOT_ACTIVE):
		return errSCMNotActive
	case errors.Is(err, windows.ERROR_SERVICE_CANNOT_ACCEPT_CTRL):
		return errSCMCannotAccept
	case errors.Is(err, windows.ERROR_SERVICE_ALREADY_RUNNING):
		return errSCMAlreadyRunning
	}
	return err
}

// afterInstall sets the recovery actions: restart 5 s after a failure, 30 s
// after the third within a day. A failure is a process that ended without
// reporting SERVICE_STOPPED: a crash, or Run ending the process when the
// function returned without a stop request. Not a stop that reported an
// error (one that outlived its StopTimeout): with recovery on non-crash
// failures that would restart the service a `proxy stop` had stopped, and a
// stopped warm standby would poll again.
func afterInstall(_ service.Service, s Spec) error {
	m, err := mgr.Connect()
	if err != nil {
		return fmt.Errorf("connecting to the service control manager: %w", err)
	}
	defer m.Disconnect()
	ws, err := m.OpenService(s.Name)
	if err != nil {
		return fmt.Errorf("opening service: %w", err)
	}
	defer ws.Close()
	actions := []mgr.RecoveryAction{
		{Type: mgr.ServiceRestart, Delay: 5 * time.Second},
		{Type: mgr.ServiceRestart, Delay: 5 * time.Second},
		{Type: mgr.ServiceRestart, Delay: 30 * time.Second},
	}
	if err := ws.SetRecoveryActions(actions, uint32((24 * time.Hour).Seconds())); err != nil {
		return fmt.Errorf("setting recovery actions: %w", err)
	}
	return nil
}

func afterUninstall(string) error { return nil }

// KeptLog is the log of service name that Uninstall kept: none here, the
// service manager keeps the log.
func KeptLog(string) string { return "" }

// DefinitionFiles are the files of service name that Uninstall removes:
// none here, the service manager keeps the definition.
func DefinitionFiles(string) []string { return nil }

// IsServiceProcess reports whether process pid is the one the service
// control manager runs for service name.
func IsServiceProcess(name string, pid int) (bool, error) {
	m, err := mgr.Connect()
	if err != nil {
		return false, err
	}
	defer m.Disconnect()
	s, err := m.OpenService(name)
	if err != nil {
		return false, err
	}
	defer s.Close()
	st, err := s.Query()
	if err != nil {
		return false, err
	}
	return st.ProcessId != 0 && st.ProcessId == uint32(pid), nil
}

// installedHere lists none here: a service not installed is named alone.
func installedHere() map[string]string { return nil }

// isAdmin reports whether this process may change services: its token is
// elevated (an administrator's, run as one).
func isAdmin() bool { return windows.GetCurrentProcessToken().IsElevated() }
