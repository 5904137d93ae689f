package service

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Spec describes one service to install.
type Spec struct {
	// Name is the service's name: the systemd unit <Name>.service, the init
	// script /etc/init.d/<Name>, the Windows service <Name>. It also names
	// the configuration and state directories of the proxy.
	Name string
	// Description is a one-line description for the service manager.
	Description string
	// Executable is the absolute path of the binary the service runs.
	Executable string
	// Arguments are the binary's arguments.
	Arguments []string
	// User runs the service as this user (Linux only); root when empty.
	User string
	// Group is User's primary group, used by the SysV script to drop
	// privileges (systemd derives it from User).
	Group string
	// StopTimeout is how long a stop may take before the service manager
	// kills what is left; it must cover the proxy's grace period.
	StopTimeout time.Duration
	// WritablePaths stay writable under the systemd hardening
	// (ProtectSystem=full makes /usr, /boot and /etc read-only).
	WritablePaths []string
	// ManualStart installs the service without starting it at boot (a warm
	// standby): only Start starts it.
	ManualStart bool
}

// DefaultStopTimeout is the StopTimeout when none is given.
const DefaultStopTimeout = time.Minute

var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ErrNotInstalled is returned by Uninstall, Start and Stop for a service
// that does not exist.
var ErrNotInstalled = errors.New("not installed")

// ErrAlreadyInstalled is returned by Install when the name is taken.
var ErrAlreadyInstalled = errors.New("already installed")

// CheckName refuses a name that cannot safely name a unit, a directory and
// a Windows service.
func CheckName(name string) error {
	if !validName.MatchString(name) || name == "." || name == ".." {
		return fmt.Errorf("service name %q: use 1 to 64 letters, digits, '-', '_' or '.', starting with a letter or digit", name)
	}
	return nil
}

func (s *Spec) check() error {
	var errs []error
	if err := CheckName(s.Name); err != nil {
		errs = append(errs, err)
	}
	if !filepath.IsAbs(s.Executable) {
		errs = append(errs, fmt.Errorf("executable %q: must be an absolute path", s.Executable))
	}
	if s.StopTimeout < 0 {
		errs = append(errs, fmt.Errorf("stop timeout %v: must not be negative", s.StopTimeout))
	}
	for _, p := range s.WritablePaths {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("writable path %q: must be absolute", p))
		}
	}
	// kardianos renders the definitions with its template engine, which
	// would take "{{" for the start of an action.
	for _, v := range append(append([]string{s.Description, s.Executable, s.User, s.Group}, s.Arguments...), s.WritablePaths...) {
		if strings.Contains(v, "{{") {
			errs = append(errs, fmt.Errorf("%q: \"{{\" cannot be written into a service definition", v))
		}
	}
	return errors.Join(errs...)
}

func (s *Spec) stopTimeout() time.Duration {
	if s.StopTimeout <= 0 {
		return DefaultStopTimeout
	}
	return s.StopTimeout
}

// Status is what Query finds out about a service.
type Status struct {
	Name string
	// Platform is the service manager: linux-systemd, unix-systemv,
	// windows-service.
	Platform string
	// Installed: the service definition exists.
	Installed bool
	// Definition is where the definition lives (a file, or the Windows
	// registry key).
	Definition string
	// Running: the service manager says it runs (or is starting).
	Running bool
	// BootStart: it starts when the machine boots.
	BootStart bool
	// Detail is extra information when the state is unusual (a failed
	// systemd unit, a status that could not be read).
	Detail string
}
