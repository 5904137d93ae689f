package service

import (
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"slices"
	"strings"

	"github.com/kardianos/service"
)

// Install installs the service s. It does not start it: Start does, and
// the service manager does at boot unless s.ManualStart.
func Install(s Spec) error {
	if err := s.check(); err != nil {
		return err
	}
	st, err := Query(s.Name)
	if err != nil {
		return err
	}
	switch {
	case st.Installed && st.Runs == "":
		return notOurs(st)
	case st.Installed:
		return fmt.Errorf("service %q is %w (%s); uninstall it first or choose another --name", s.Name, ErrAlreadyInstalled, st.Definition)
	}
	if err := checkPlatformSpec(s); err != nil {
		return err
	}
	svc, err := newService(s, nil, nil)
	if err != nil {
		return err
	}
	if err := svc.Install(); err != nil {
		// The name was free (checked above): what a failed install made is ours.
		_ = svc.Uninstall()
		_ = afterUninstall(s.Name)
		return asAdmin(fmt.Errorf("installing service %q (%s): %w", s.Name, svc.Platform(), err))
	}
	if err := afterInstall(svc, s); err != nil {
		_ = svc.Uninstall()
		_ = afterUninstall(s.Name)
		return asAdmin(fmt.Errorf("installing service %q (%s): %w", s.Name, svc.Platform(), err))
	}
	return nil
}

// Uninstall stops the service if it runs and removes its definition and
// everything Install or the service manager made for it (SysV rc.d links
// and pid file), but its log: a SysV service's log gets a last line saying
// it is kept, which lets a new install of the name write on in it
// (KeptLog). Files of the program itself are the caller's.
func Uninstall(name string) error {
	svc, err := installed(name)
	if err != nil {
		return err
	}
	if st, err := Query(name); err == nil && st.Running {
		if err := Stop(name); err != nil {
			return err
		}
	}
	if err := svc.Uninstall(); err != nil {
		return asAdmin(fmt.Errorf("uninstalling service %q (%s): %w", name, svc.Platform(), err))
	}
	if err := afterUninstall(name); err != nil {
		return asAdmin(fmt.Errorf("uninstalling service %q (%s): %w", name, svc.Platform(), err))
	}
	return nil
}

// Start asks the service manager to start the service. It returns once
// the service manager has started it, not when it first polled.
func Start(name string) error {
	svc, err := installed(name)
	if err != nil {
		return err
	}
	if err := start(svc, name); err != nil {
		return asAdmin(fmt.Errorf("starting service %q (%s): %w", name, svc.Platform(), err))
	}
	return nil
}

// Stop asks the service manager to stop the service and waits until it has
// stopped: running work finishes first, within the grace period.
func Stop(name string) error {
	svc, err := installed(name)
	if err != nil {
		return err
	}
	if err := stop(svc, name); err != nil {
		return asAdmin(fmt.Errorf("stopping service %q (%s): %w", name, svc.Platform(), err))
	}
	return nil
}

// StopReported is Stop, and says whether the service was running (or
// stopping, on Windows, and waited for): a stop of a stopped service
// succeeds and changes nothing, which the commands say rather than that
// they stopped it.
func StopReported(name string) (wasRunning bool, err error) {
	before, qerr := Query(name)
	if err := Stop(name); err != nil {
		return false, err
	}
	return qerr != nil || !before.Installed || before.Running || before.Detail == DetailStopping, nil
}

// Query reports whether the service is installed, running and started at
// boot. A service that is not installed is not an error.
func Query(name string) (Status, error) {
	if err := CheckName(name); err != nil {
		return Status{}, err
	}
	svc, err := newService(Spec{Name: name}, nil, nil)
	if err != nil {
		return Status{}, err
	}
	st := Status{Name: name, Platform: svc.Platform()}
	st.Definition, st.Installed, err = definition(svc, name)
	if err != nil || !st.Installed {
		return st, err
	}
	text, err := definitionText(name, st.Definition)
	if err != nil {
		return st, fmt.Errorf("service %q: reading its definition %s: %w", name, st.Definition, err)
	}
	if st.Runs, st.Args = runsAndArgs(text, name); st.Runs == "" {
		// Another program's: its init script is not run to ask.
		st.Detail = ErrNotOurs.Error()
		return st, nil
	}
	st.Running, st.Detail, err = running(svc, name)
	if err != nil {
		st.Detail = err.Error()
	}
	st.BootStart = bootStart(name)
	return st, nil
}

// Platform names the service manager Install uses on this host.
func Platform() string {
	chooseSystem()
	return service.Platform()
}

func installed(name string) (service.Service, error) {
	st, err := Query(name)
	if err != nil {
		return nil, err
	}
	if !st.Installed {
		return nil, fmt.Errorf("service %q is %w (%s)%s", name, ErrNotInstalled, st.Platform, InstalledHere())
	}
	if st.Runs == "" {
		return nil, notOurs(st)
	}
	return newService(Spec{Name: name}, nil, nil)
}

// newService makes the kardianos service for s.
func newService(s Spec, prg service.Interface, extra service.KeyValue) (service.Service, error) {
	chooseSystem()
	if prg == nil {
		prg = nopProgram{}
	}
	cfg := kardianosConfig(s)
	for k, v := range extra {
		cfg.Option[k] = v
	}
	svc, err := service.New(prg, cfg)
	if err != nil {
		return nil, fmt.Errorf("service manager: %w", err)
	}
	return svc, nil
}

// kardianosConfig is the kardianos configuration of s. The Linux
// definitions are ours, rendered in full, so kardianos's template engine
// finds no action in them and writes them as they are.
func kardianosConfig(s Spec) *service.Config {
	startType := "automatic"
	if s.ManualStart {
		startType = "manual"
	}
	return &service.Config{
		Name:        s.Name,
		DisplayName: s.Name,
		Description: s.Description,
		Executable:  s.Executable,
		Arguments:   s.Arguments,
		Option: service.KeyValue{
			"SystemdScript":          SystemdUnit(s),
			"SysvScript":             SysVScript(s),
			"StartType":              startType,
			"OnFailure":              "restart",
			"OnFailureDelayDuration": "5s",
			"OnFailureResetPeriod":   86400,
		},
	}
}

// nopProgram is the program of a service that is only controlled here, not
// run.
type nopProgram struct{}

func (nopProgram) Start(service.Service) error { return nil }
func (nopProgram) Stop(service.Service) error  { return nil }

// InstalledHere names the proxy and automator services installed on this
// host ("; installed here: proxy-b (a proxy), automator (an automator)"),
// or "" when there is none: what a command
// given no --name, or a misspelt one, says besides that the service is
// not installed (a review: it advised installing one).
func InstalledHere() string {
	found := installedHere()
	if len(found) == 0 {
		return ""
	}
	names := make([]string, 0, len(found))
	for n := range found {
		names = append(names, n)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s (%s)", n, article(programs[found[n]]))
	}
	return "; installed here: " + strings.Join(parts, ", ")
}

// asAdmin adds to err, of a change to a service that this process was not
// allowed to make, that only root (an administrator, on windows) may make
// it: the service manager's own words name a file or an access it was
// denied (a review: "cannot create /var/run/NAME.pid.lock…: Permission
// denied", and nothing of who may).
func asAdmin(err error) error {
	if err == nil || isAdmin() {
		return err
	}
	msg := err.Error()
	if !errors.Is(err, fs.ErrPermission) && !strings.Contains(msg, "ermission denied") && !strings.Contains(msg, "Access is denied") &&
		!strings.Contains(msg, "Interactive authentication required") {
		return err
	}
	who := "root"
	if runtime.GOOS == "windows" {
		who = "an administrator"
	}
	return fmt.Errorf("%w (this user may not change services: run it as %s)", err, who)
}
