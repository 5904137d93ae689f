package service

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/opsgate/opsgate/internal/winname"
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

// ErrNotOurs is returned by Install, Uninstall, Start and Stop for a
// service of that name that `proxy install` or `automator install` did not
// make (Status.Runs is empty): another program's, which they leave alone.
var ErrNotOurs = errors.New("not one that `proxy install` or `automator install` made")

// CheckName refuses a name that cannot safely name a unit, a directory and
// a Windows service.
func CheckName(name string) error { return checkName(name, runtime.GOOS == "windows") }

// checkName is CheckName, with the names Windows gives a meaning of its
// own refused when onWindows.
func checkName(name string, onWindows bool) error {
	if !validName.MatchString(name) || name == "." || name == ".." {
		return fmt.Errorf("service name %q: use 1 to 64 letters, digits, '-', '_' or '.', starting with a letter or digit", name)
	}
	// Windows drops a trailing dot from a folder's name, so that
	// %ProgramData%\proxy. would be proxy's folder; a device name names no
	// folder at all.
	if onWindows && (strings.HasSuffix(name, ".") || winname.IsDevice(name)) {
		return fmt.Errorf("service name %q: Windows gives it a meaning of its own (a trailing '.', which it drops from a folder's name, or a device name: CON, PRN, AUX, NUL, COM0-9, LPT0-9, with or without an extension)", name)
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
	// Runs is the command the definition runs the program with, after
	// "--service NAME" on its command line: "run" for a proxy, "serve" for
	// an automator. Every definition Install writes has one.
	// Empty for a definition without it, another program's service
	// (Running, BootStart and Detail are then not asked: its init script
	// is not run). See Expect.
	Runs string
	// Args are the words of the definition after Runs, unquoted (the
	// command's flags, and on some platforms what follows them in the
	// definition): for a look at a flag's value, not to run.
	Args []string
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

// Expect refuses a service that is installed but is not the program's
// whose command is cmd ("run", "serve"): another program's service, or
// the other one of this pair's. A command of one would otherwise stop,
// start or remove the other's service.
func (st Status) Expect(cmd string) error {
	if !st.Installed || st.Runs == cmd {
		return nil
	}
	if st.Runs == "" {
		return notOurs(st)
	}
	own, theirs := programs[cmd], programs[st.Runs]
	return fmt.Errorf("service %q (%s) is %s's (it runs `%s`), not %s's: manage it with `%s`, or choose another --name", st.Name, st.Definition, article(theirs), st.Runs, article(own), theirs)
}

// programs names the program of each command a definition may run.
var programs = map[string]string{"run": "proxy", "serve": "automator"}

func article(prog string) string {
	if strings.IndexByte("aeiou", prog[0]) >= 0 {
		return "an " + prog
	}
	return "a " + prog
}

// notOurs is ErrNotOurs for the service st.
func notOurs(st Status) error {
	return fmt.Errorf("service %q (%s) is %w: its definition does not run `%s %s`; this command leaves another program's service alone (choose another --name)", st.Name, st.Definition, ErrNotOurs, Flag, st.Name)
}

// runsAfterFlag is the command after "--service NAME" in the command line
// of a service definition (a systemd unit, an init script, a Windows
// service's command line), each word perhaps quoted: one of programs'
// commands, or empty when there is none.
func runsAfterFlag(def, name string) string {
	cmd, _ := runsAndArgs(def, name)
	return cmd
}

// runsAndArgs is runsAfterFlag, and the words after it, unquoted.
func runsAndArgs(def, name string) (string, []string) {
	words := strings.Fields(def)
	for i := 0; i+2 < len(words); i++ {
		if unquote(words[i]) == Flag && unquote(words[i+1]) == name {
			if cmd := unquote(words[i+2]); programs[cmd] != "" {
				var args []string
				for _, w := range words[i+3:] {
					args = append(args, unquote(w))
				}
				return cmd, args
			}
		}
	}
	return "", nil
}

func unquote(w string) string {
	if len(w) >= 2 && (w[0] == '\'' || w[0] == '"') && w[len(w)-1] == w[0] {
		return w[1 : len(w)-1]
	}
	return w
}
