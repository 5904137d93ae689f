package service

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kardianos/service"
)

const (
	platformSystemd = "linux-systemd"
	platformSysV    = "unix-systemv"
	systemdUnitDir  = "/etc/systemd/system"
)

var chooseOnce sync.Once

// chooseSystem restricts kardianos to systemd, when it runs, and SysV init
// otherwise: those are the definitions rendered here.
func chooseSystem() {
	chooseOnce.Do(func() {
		var systemd, sysv service.System
		for _, s := range service.AvailableSystems() {
			switch s.String() {
			case platformSystemd:
				systemd = s
			case platformSysV:
				sysv = s
			}
		}
		if systemd != nil && systemd.Detect() {
			service.ChooseSystem(systemd)
		} else if sysv != nil {
			service.ChooseSystem(sysv)
		}
	})
}

func checkPlatformSpec(s Spec) error {
	if s.User != "" {
		if _, err := LookupUser(s.User); err != nil {
			return err
		}
	}
	chooseSystem()
	if service.Platform() == platformSystemd {
		// A unit of that name that systemd has from elsewhere (a
		// package's, one it generates from an init script) would be
		// overridden by the one Install writes in /etc/systemd/system,
		// and disabled by Uninstall.
		if p := unitElsewhere(s.Name, systemdUnitDirs, sysvInitDir); p != "" {
			return fmt.Errorf("service %q: systemd has a unit of that name already (%s): the one install writes in %s would override it, and uninstall would disable it; choose another --name", s.Name, p, systemdUnitDir)
		}
		return nil
	}
	if service.Platform() != platformSysV {
		return nil
	}
	// The init script keeps its pid and its log in these files, and
	// uninstall removes the pid file: files of another program by that
	// name (a daemon's pid file, a syslog file) would be taken over, their
	// process signalled by stop, the pid file deleted and the log written
	// in. The log an earlier uninstall of this name kept is this service's.
	for _, p := range sysvFiles(s.Name) {
		if _, err := os.Lstat(p); err == nil {
			if p == sysvLogFile(s.Name) && keptLog(p, s.Name) {
				continue
			}
			use := "the init script would use it and uninstall would delete it"
			if p == sysvLogFile(s.Name) {
				use = "the init script would write the service's log in it"
			}
			return fmt.Errorf("service %q: %s exists already: %s; choose another --name (or remove the file, if an earlier install left it)", s.Name, p, use)
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// sysvLogFile is the log the SysV init script of service name writes: the
// service's output and the supervisor's notes.
func sysvLogFile(name string) string { return filepath.Join(sysvLogDir, name+".log") }

// keptLogNote is what uninstall appends to the log of a SysV service,
// which it keeps: after a failover, say, that log is the only record on a
// host without syslog of what the service did. A new install of the name
// takes a log whose last line ends with it for its own, and writes on in
// it.
func keptLogNote(name string) string {
	return "service " + name + " uninstalled; its log is kept, and an install of " + name + " again writes on in it"
}

// maxLastLine bounds how much of a log's end keptLog and keepLog read for
// its last line: from 4 KiB, growing to it while no line starts within
// what was read (a JSON record may be long).
const maxLastLine = 1 << 20

// lastLine is the last line of the file at path (without its newline),
// from its last maxLastLine bytes, and whether the file ends with a
// newline (an empty one does).
func lastLine(path string) (string, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", false, err
	}
	for window := int64(4096); ; window *= 16 {
		window = min(window, maxLastLine)
		off := max(fi.Size()-window, 0)
		b := make([]byte, fi.Size()-off)
		if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
			return "", false, err
		}
		ended := len(b) == 0 || b[len(b)-1] == '\n'
		b = bytes.TrimSuffix(b, []byte("\n"))
		i := bytes.LastIndexByte(b, '\n')
		if i < 0 && off > 0 && window < maxLastLine {
			continue // the line starts further back
		}
		return string(b[i+1:]), ended, nil
	}
}

// keptLog reports whether the file at path is the log of service name
// that an uninstall kept: a regular file whose last line is the note.
func keptLog(path, name string) bool {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	line, _, err := lastLine(path)
	note := regexp.QuoteMeta(keptLogNote(name))
	// The whole line, as keepLog writes it: a line of another's that
	// merely ends with the note (a syslog file's, say) is not it.
	kept := regexp.MustCompile(`^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4} ` + note + `|\{"time":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ","level":"INFO","msg":"` + note + `"\})$`)
	return err == nil && kept.MatchString(line)
}

// keepLog appends the note to the log of service name, if it has one, in
// the log's format: a JSON record after a JSON record (log_format json),
// as the supervisor's own notes.
func keepLog(name string) error {
	path := sysvLogFile(name)
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) || (err == nil && !fi.Mode().IsRegular()) {
		return nil
	}
	if err != nil {
		return err
	}
	line, ended, err := lastLine(path)
	if err != nil {
		return err
	}
	now := time.Now()
	note := now.Format("2006-01-02T15:04:05-0700") + " " + keptLogNote(name) + "\n"
	if strings.HasPrefix(line, "{") {
		note = `{"time":"` + now.UTC().Format("2006-01-02T15:04:05Z") + `","level":"INFO","msg":"` + keptLogNote(name) + `"}` + "\n"
	}
	if !ended {
		// A service killed in the middle of a line: the note on a line
		// of its own.
		note = "\n" + note
	}
	// Not through a link put there since the Lstat above.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(note)
	return errors.Join(err, f.Close())
}

// KeptLog is the log of service name that Uninstall kept, or "" when
// there is none: the SysV init script's.
func KeptLog(name string) string {
	if p := sysvLogFile(name); keptLog(p, name) {
		return p
	}
	return ""
}

// systemdUnitDirs are the directories other than systemdUnitDir where
// systemd finds units: packages', the administrator's in /usr/local,
// runtime and generated ones.
var systemdUnitDirs = []string{
	"/run/systemd/system", "/run/systemd/transient",
	"/run/systemd/generator.early", "/run/systemd/generator", "/run/systemd/generator.late",
	"/usr/local/lib/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system",
}

// unitElsewhere is the path of a unit NAME.service in one of dirs, or of
// an init script initDir/NAME (systemd makes a unit of that name from it),
// or empty when there is none.
func unitElsewhere(name string, dirs []string, initDir string) string {
	paths := make([]string, 0, len(dirs)+1)
	for _, d := range dirs {
		paths = append(paths, filepath.Join(d, name+".service"))
	}
	for _, p := range append(paths, filepath.Join(initDir, name)) {
		if _, err := os.Lstat(p); err == nil {
			return p
		}
	}
	return ""
}

// maxDefinition bounds how much of a definition file is read to find its
// command line: ours are a few KiB.
const maxDefinition = 1 << 20

// definitionText is what the definition of service name says: the file
// at path (its systemd unit or init script), up to a bound.
func definitionText(_ string, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxDefinition))
	return string(b), err
}

// DefinitionFiles are the files of service name that exist now and that
// Uninstall removes: its systemd unit, or its init script, rc.d links and
// pid file; Uninstall's caller lists them as removed. The log Uninstall
// keeps (KeptLog).
func DefinitionFiles(name string) []string {
	candidates := []string{filepath.Join(systemdUnitDir, name+".service"), filepath.Join(sysvInitDir, name)}
	links, _ := filepath.Glob("/etc/rc[0-6S].d/[SK][0-9][0-9]" + name)
	for _, l := range links {
		if isLinkTo(l, filepath.Join(sysvInitDir, name)) {
			candidates = append(candidates, l)
		}
	}
	var out []string
	for _, p := range append(candidates, sysvPIDFile(name)) {
		if _, err := os.Lstat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// sysvFiles are the files the SysV init script of service name makes: its
// pid file and its log.
func sysvFiles(name string) []string {
	return []string{sysvPIDFile(name), sysvLogFile(name)}
}

// sysvPIDFile is the SysV init script's pid file of service name, which
// Uninstall removes.
func sysvPIDFile(name string) string { return filepath.Join(sysvPIDDir, name+".pid") }

func definition(svc service.Service, name string) (string, bool, error) {
	path := filepath.Join(sysvInitDir, name)
	if svc.Platform() == platformSystemd {
		path = filepath.Join(systemdUnitDir, name+".service")
	}
	_, err := os.Lstat(path)
	switch {
	case err == nil:
		return path, true, nil
	case errors.Is(err, os.ErrNotExist):
		return path, false, nil
	}
	return path, false, err
}

func running(svc service.Service, name string) (bool, string, error) {
	if svc.Platform() == platformSystemd {
		st, err := svc.Status()
		if err != nil {
			return false, "", err
		}
		return st == service.StatusRunning, "", nil
	}
	out, err := initScript(name, "status")
	var exit *exec.ExitError
	switch {
	case err == nil:
		return true, "", nil
	case errors.As(err, &exit) && exit.ExitCode() == 3:
		return false, "", nil
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return false, strings.TrimSpace(out), nil
	}
	return false, "", fmt.Errorf("%s status: %w: %s", filepath.Join(sysvInitDir, name), err, strings.TrimSpace(out))
}

func bootStart(name string) bool {
	chooseSystem()
	if service.Platform() == platformSystemd {
		out, _ := exec.Command("systemctl", "is-enabled", name+".service").Output()
		return strings.TrimSpace(string(out)) == "enabled"
	}
	links, _ := filepath.Glob("/etc/rc[2345].d/S[0-9][0-9]" + name)
	for _, l := range links {
		if isLinkTo(l, filepath.Join(sysvInitDir, name)) {
			return true
		}
	}
	return false
}

func start(svc service.Service, name string) error {
	if svc.Platform() == platformSystemd {
		return svc.Start()
	}
	if out, err := initScript(name, "start"); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(out))
	}
	return nil
}

func stop(svc service.Service, name string) error {
	if svc.Platform() == platformSystemd {
		return svc.Stop()
	}
	if out, err := initScript(name, "stop"); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(out))
	}
	return nil
}

// initScript runs /etc/init.d/NAME ACTION with the clean environment boot
// gives it, as service(8) does.
func initScript(name, action string) (string, error) {
	cmd := exec.Command(filepath.Join(sysvInitDir, name), action)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Dir = "/"
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func afterInstall(svc service.Service, s Spec) error {
	if !s.ManualStart {
		return nil
	}
	if svc.Platform() == platformSystemd {
		if out, err := exec.Command("systemctl", "disable", s.Name+".service").CombinedOutput(); err != nil {
			return fmt.Errorf("systemctl disable: %w: %s", err, bytes.TrimSpace(out))
		}
		return nil
	}
	return removeRCLinks(s.Name, "S")
}

func afterUninstall(name string) error {
	chooseSystem()
	if service.Platform() == platformSystemd {
		_ = exec.Command("systemctl", "reset-failed", name+".service").Run()
		return nil
	}
	var errs []error
	errs = append(errs, removeRCLinks(name, "SK"))
	if err := os.Remove(sysvPIDFile(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	errs = append(errs, keepLog(name))
	return errors.Join(errs...)
}

// removeRCLinks removes the /etc/rc?.d links of kinds ("S", "K") that lead
// to /etc/init.d/NAME; kardianos makes them and leaves them behind.
func removeRCLinks(name, kinds string) error {
	links, _ := filepath.Glob("/etc/rc[0-6S].d/[" + kinds + "][0-9][0-9]" + name)
	var errs []error
	for _, l := range links {
		if isLinkTo(l, filepath.Join(sysvInitDir, name)) {
			if err := os.Remove(l); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func isLinkTo(link, target string) bool {
	dest, err := os.Readlink(link)
	if err != nil {
		return false
	}
	if !filepath.IsAbs(dest) {
		dest = filepath.Join(filepath.Dir(link), dest)
	}
	return filepath.Clean(dest) == target
}

// IsServiceProcess reports whether process pid is the proxy that the
// service manager runs for service name: its command line is
// `PROGRAM --service NAME ...` (the SysV supervisor's child, or systemd's
// main process).
func IsServiceProcess(name string, pid int) (bool, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false, err
	}
	args := strings.Split(strings.TrimSuffix(string(data), "\x00"), "\x00")
	if len(args) < 2 {
		return false, nil
	}
	got, _, ok, _ := SplitServiceFlag(args[1:])
	return ok && got == name, nil
}

// installedHere lists the services of this host whose definitions run
// --service NAME with one of programs' commands (their Runs): the proxies'
// and automators' installed here, by name, each with its command.
func installedHere() map[string]string {
	out := map[string]string{}
	units, _ := filepath.Glob(filepath.Join(systemdUnitDir, "*.service"))
	scripts, _ := filepath.Glob(filepath.Join(sysvInitDir, "*"))
	for _, p := range append(units, scripts...) {
		name := strings.TrimSuffix(filepath.Base(p), ".service")
		if CheckName(name) != nil {
			continue
		}
		if text, err := definitionText(name, p); err == nil {
			if cmd := runsAfterFlag(text, name); cmd != "" {
				out[name] = cmd
			}
		}
	}
	return out
}

// isAdmin reports whether this process may change services: root.
func isAdmin() bool { return os.Geteuid() == 0 }
