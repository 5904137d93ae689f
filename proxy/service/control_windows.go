package service

import (
	"errors"
	"fmt"
	"time"

	"github.com/kardianos/service"
	"golang.org/x/sys/windows"
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

func definition(svc service.Service, name string) (string, bool, error) {
	key := `HKLM\SYSTEM\CurrentControlSet\Services\` + name
	_, err := svc.Status()
	switch {
	case errors.Is(err, service.ErrNotInstalled):
		return key, false, nil
	case err != nil:
		return key, false, err
	}
	return key, true, nil
}

func running(svc service.Service, _ string) (bool, string, error) {
	st, err := svc.Status()
	if err != nil {
		return false, "", err
	}
	return st == service.StatusRunning, "", nil
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

// start starts the service; one that runs already is started, as for
// systemctl and the SysV script.
func start(svc service.Service, _ string) error {
	if err := svc.Start(); err != nil && !errors.Is(err, windows.ERROR_SERVICE_ALREADY_RUNNING) {
		return err
	}
	return nil
}

// stop stops the service and waits until it has stopped; one that does not
// run is stopped, as for systemctl and the SysV script.
func stop(svc service.Service, _ string) error {
	if err := svc.Stop(); err != nil && !errors.Is(err, windows.ERROR_SERVICE_NOT_ACTIVE) {
		return err
	}
	return nil
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
