package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/opsgate/opsgate/internal/clihelp"
	"github.com/opsgate/opsgate/internal/scriptenv"
	"github.com/opsgate/opsgate/internal/secretfile"
	"github.com/opsgate/opsgate/proxy/agent"
	"github.com/opsgate/opsgate/proxy/config"
	"github.com/opsgate/opsgate/proxy/service"
)

const (
	// defaultServiceName is the service of `proxy install` without --name.
	defaultServiceName = "proxy"
	// configFileName is the service's copy of the config in its ConfigDir.
	configFileName = "proxy.yaml"
	// stopMargin is what a stop may take beyond the grace period: posting
	// the last results and exiting.
	stopMargin = 30 * time.Second
	// startWait is how long `proxy start` waits for the first poll.
	startWait = 10 * time.Second
	// pollStale: a running proxy whose last successful poll is older than
	// this is reported as not polling (an idle poll returns every 30 s).
	pollStale = 2 * time.Minute
)

// uninstallLockWait is how long uninstall waits for a proxy holding the
// state directory to end (see lockToRemove); tests shorten it.
var uninstallLockWait = 5 * time.Second

// stateFile is the agent's state file in the config's state_dir, if any.
func stateFile(cfg config.Config) string {
	if cfg.StateDir == "" {
		return ""
	}
	return filepath.Join(cfg.StateDir, agent.StateFileName)
}

func serviceCommand(verb string, args []string, env Env) error {
	switch verb {
	case "install":
		return cmdInstall(args, env)
	case "status":
		return cmdStatus(args, env)
	}
	return cmdControl(verb, args, env)
}

// runService is `proxy --service NAME run ...`, the command line of the
// installed service: `proxy run` under the service manager. A stop request
// cancels ctx exactly as SIGTERM does for `proxy run`; the log goes to the
// system log. An error is logged there once, in the config's log format,
// and not printed again by Main (the service's stderr goes to the same
// log): it returns errLogged.
func runService(ctx context.Context, name string, args []string, env Env) error {
	if len(args) == 0 || args[0] != "run" {
		return fmt.Errorf("%s %s: only `run` runs as a service, got %q", service.Flag, name, args)
	}
	// A broken config is reported to the system log, where an operator of a
	// service looks (on Windows, stderr goes nowhere).
	cfg, file, cfgErr := runConfig(args[1:], Env{Stdout: env.Stdout, Stderr: io.Discard})
	format := cfg.LogFormat
	if cfgErr != nil {
		format = runLogFormat(args[1:])
	}
	err := service.Run(ctx, service.RunOptions{Name: name, StopTimeout: cfg.GracePeriod + stopMargin, Stderr: env.Stderr, LogFormat: format},
		func(ctx context.Context, log io.Writer) error {
			err := cfgErr
			if err == nil {
				// So is a proxy that cannot start (its state_dir held by
				// another running proxy, say).
				err = runProxy(ctx, cfg, file, Env{Stdout: env.Stdout, Stderr: log, Reaper: env.Reaper})
			}
			if err != nil {
				newLogger(log, format).Error("the service cannot start", "service", name, "err", err)
				return errLogged{err}
			}
			return nil
		})
	if err != nil && !errors.As(err, new(errLogged)) {
		newLogger(env.Stderr, format).Error("the service ended", "service", name, "err", err)
		return errLogged{err}
	}
	return err
}

// errLogged is an error logged already, which Main does not print again.
type errLogged struct{ error }

func (e errLogged) Unwrap() error { return e.error }

// runLogFormat is the log format of `proxy run` with args whose config
// is not valid: --log-format, else the file's log_format if it can be
// read, else text.
func runLogFormat(args []string) string {
	if f, ok := clihelp.FlagValue(args, "log-format"); ok {
		return f
	}
	if path, ok := clihelp.FlagValue(args, "config"); ok {
		if cfg, err := config.Load(path); err == nil {
			return cfg.LogFormat
		}
	}
	return ""
}

func newFlagSet(name string, env Env) *flag.FlagSet {
	fs := flag.NewFlagSet("proxy "+name, flag.ContinueOnError)
	fs.Usage = clihelp.Usage(env.Stdout, usage, "proxy", name, fs) // quiet on a parse error: Main prints it
	return fs
}

// cmdInstall installs the service: it copies the config to the service's
// config directory (adding state_dir), makes the state directory and
// installs the OS service that runs `proxy run` on the copy. It does not
// start it.
func cmdInstall(args []string, env Env) error {
	fs := newFlagSet("install", env)
	path := fs.String("config", "", "proxy config file (the profile from `automator account create` plus local settings)")
	name := fs.String("name", defaultServiceName, "service name; several proxies (of different accounts) need different names")
	userName := fs.String("user", "", "run the service as this existing, unprivileged user (Linux; default root)")
	manual := fs.Bool("manual-start", false, "do not start the service at boot: a warm standby, started by `proxy start`")
	if err := clihelp.ParseNoArgs(fs, args); err != nil {
		return err
	}
	if *path == "" {
		return errors.New("--config is required")
	}
	if err := service.CheckName(*name); err != nil {
		return fmt.Errorf("--name: %w", err)
	}
	src, err := filepath.Abs(*path)
	if err != nil {
		return err
	}
	data, err := readConfigText(src)
	if err != nil {
		return err
	}
	cfg, err := config.Load(src)
	if err != nil {
		return err
	}
	cfg.ApplyDefaults()
	if cfg.ScriptsDir == "" {
		// Validate's words name run's --scripts-dir, which install does
		// not take (a review).
		return fmt.Errorf("invalid proxy config %s: scripts_dir: required: a service runs the scripts of the absolute scripts_dir in its config (install takes no --scripts-dir): add scripts_dir: /opt/opsgate/scripts, say, to %s", src, src)
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid proxy config %s: %w", src, err)
	}
	if w := cfg.ScriptsDirWritten(); !filepath.IsAbs(w) {
		// The service reads the copy install makes, in another directory,
		// against which a relative path would name another place.
		return fmt.Errorf("scripts_dir in %s: %q must be an absolute path for a service (install copies the config elsewhere: give %s)", src, w, cfg.ScriptsDir)
	}
	stateDir := service.StateDir(*name)
	if cfg.StateDir != "" && filepath.Clean(cfg.StateDir) != stateDir {
		return fmt.Errorf("state_dir in %s: install sets it to %s for service %q; remove the line", src, stateDir, *name)
	}
	var u *service.User
	if *userName != "" {
		if u, err = service.LookupUser(*userName); err != nil {
			return fmt.Errorf("--user: %w", err)
		}
	}
	if st, err := service.Query(*name); err != nil {
		return err
	} else if err := st.Expect(serviceRuns); err != nil {
		return err
	} else if st.Installed {
		return fmt.Errorf("service %q is already installed (%s); uninstall it first or choose another --name", *name, st.Definition)
	}
	// A state directory there already must be a proxy's (left by an
	// earlier install, or a proxy run by hand on it): uninstall removes
	// what a proxy keeps there, and the service would write over it.
	if err := stateDirOfAProxy(stateDir); err != nil {
		return fmt.Errorf("%w; choose another --name, or move them out", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this program's path: %w", err)
	}
	// Nor one whose binary or scripts vanish at reboot, or that systemd
	// hides from it.
	if err := service.CheckNotTemporary(service.Scripts, "scripts_dir in "+src+":", cfg.ScriptsDir); err != nil {
		return err
	}
	if err := service.CheckNotTemporary(service.Binary, "the binary", exe); err != nil {
		return err
	}
	if u != nil {
		// A service that cannot reach its binary or its scripts would
		// only fail at every start.
		if err := u.Reach(exe, service.PermExecute); err != nil {
			return fmt.Errorf("%w: the service runs %s; install from a copy of the binary that %s can run (such as /usr/local/bin/proxy)", err, exe, u.Name)
		}
		if err := u.Reach(cfg.ScriptsDir, service.PermRead|service.PermExecute); err != nil {
			return fmt.Errorf("scripts_dir in %s: %w, so the service could not start; give %s access, or move the scripts where it can reach them", src, err, u.Name)
		}
	}
	configDir := service.ConfigDir(*name)
	installed := filepath.Join(configDir, configFileName)

	var undo []func()
	fail := func(err error) error {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		return err
	}
	created, err := service.MakeDir(configDir, 0o755, nil, true)
	if err != nil {
		return fail(fmt.Errorf("making %s: %w", configDir, err))
	}
	if created {
		undo = append(undo, func() { _ = os.Remove(configDir) })
	}
	mode := os.FileMode(0o600)
	if u != nil {
		mode = 0o640 // root's, readable by the service's group
	}
	if err := service.WriteNewFile(installed, installedConfig(data, *name, cfg.StateDir == "", stateDir), mode, u, true); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fail(fmt.Errorf("%s exists already: remove it, or uninstall the service that uses it", installed))
		}
		return fail(fmt.Errorf("writing %s: %w", installed, err))
	}
	undo = append(undo, func() { _ = os.Remove(installed) })
	if c, err := config.Load(installed); err != nil || filepath.Clean(c.StateDir) != stateDir {
		return fail(fmt.Errorf("the service's copy of the config %s does not read back with state_dir %s (%v); is %s a YAML mapping?", installed, stateDir, err, src))
	}
	created, err = service.MakeDir(stateDir, 0o755, u, false)
	if err != nil {
		return fail(fmt.Errorf("making %s: %w", stateDir, err))
	}
	if !created && u != nil {
		// Left by an earlier install (uninstall keeps it while results
		// wait in its spool), perhaps of another user: the service could
		// not take its lock, and would fail at every start.
		if err := service.CheckOwner(stateDir, u); err != nil {
			return fail(fmt.Errorf("--user: %w", err))
		}
	}
	if created {
		undo = append(undo, func() { _ = os.Remove(stateDir) })
	}
	spec := installSpec(*name, exe, installed, cfg, u, *manual)
	runAs := "root"
	if u != nil {
		runAs = u.Name
	}
	if err := service.Install(spec); err != nil {
		return fail(err)
	}
	st, _ := service.Query(*name)
	w := env.Stdout
	fmt.Fprintf(w, "Installed service %s (%s): %s\n", *name, st.Platform, st.Definition)
	fmt.Fprintf(w, "  runs:           %s %s\n", exe, strings.Join(spec.Arguments, " "))
	fmt.Fprintf(w, "  config:         %s (a copy of %s: edit the copy, then restart)\n", installed, src)
	fmt.Fprintf(w, "  state:          %s\n", stateDir)
	if st.Platform != "windows-service" {
		fmt.Fprintf(w, "  user:           %s\n", runAs)
	}
	fmt.Fprintf(w, "  starts at boot: %s\n", yesNo(st.BootStart))
	fmt.Fprintf(w, "It is stopped. Start it with `proxy start --name %s`.\n", *name)
	if who := secretfile.ReadableByOthers(src); who != "" {
		fmt.Fprintf(w, "Note: %s, which install copied, holds the account's token and key and is readable by %s: remove it, or "+secretfile.Restrict+" (the service's copy is private).\n", src, who)
	}
	return nil
}

// installSpec is the service `proxy install` installs: `proxy run` on the
// service's copy of the config, with room to stop for the grace period.
func installSpec(name, exe, configPath string, cfg config.Config, u *service.User, manual bool) service.Spec {
	spec := service.Spec{
		Name:        name,
		Description: fmt.Sprintf("opsgate proxy: runs scripts for the automator %s, polling it over outbound connections", cfg.AutomatorURL),
		Executable:  exe,
		Arguments:   []string{service.Flag, name, serviceRuns, "--config", configPath},
		StopTimeout: cfg.GracePeriod + stopMargin,
		ManualStart: manual,
	}
	if u != nil {
		spec.User, spec.Group = u.Name, u.Group
	}
	return spec
}

// readConfigText reads the config file at path as UTF-8 text, for the
// service's copy: a profile saved by Windows PowerShell 5's > is UTF-16,
// to which the lines install adds, in UTF-8, cannot be appended
// (secretfile.Decode; config.Load reads either).
func readConfigText(path string) ([]byte, error) {
	data, err := secretfile.ReadRegularFile(path, config.MaxFileSize)
	if err != nil {
		return nil, fmt.Errorf("reading proxy config: %w", err)
	}
	text, err := secretfile.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("parsing proxy config %s: the file is %w", path, err)
	}
	return []byte(text), nil
}

// installedConfig is the service's copy of the config: the file as it is,
// then the mark uninstall looks for, then state_dir when the file does not
// set it. A file that ends in empty documents (a trailing "---") gets them
// after the added lines, which must stay in the first document. A file
// that is itself such a copy (upgrade-proxy.md installs from a copy of the
// service's config) has its mark named for this service where it is, and
// gets no second one.
func installedConfig(data []byte, name string, addStateDir bool, stateDir string) []byte {
	body, tail := splitEmptyTail(data)
	lines := strings.SplitAfter(string(body), "\n")
	marked := false
	for i, l := range lines {
		if strings.HasPrefix(l, installMarkPrefix) {
			end := l[len(strings.TrimRight(l, "\r\n")):]
			lines[i], marked = installMark(name)+end, true
		}
	}
	out := []byte(strings.Join(lines, ""))
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	if !marked {
		out = append(out, "\n"+installMark(name)+"\n"...)
	}
	if addStateDir {
		out = append(out, "# The service keeps its status file here.\nstate_dir: '"+strings.ReplaceAll(stateDir, "'", "''")+"'\n"...)
	}
	return append(out, tail...)
}

// splitEmptyTail cuts data before its trailing empty documents: the last
// lines after its settings that are blank, comments at the start of a line
// or document markers ("---", "..."), when a marker is among them. Without
// one, all of data is the body.
func splitEmptyTail(data []byte) (body, tail []byte) {
	lines := strings.SplitAfter(string(data), "\n")
	cut, marker := len(lines), false
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimRight(lines[i], "\r\n")
		isMarker := l == "---" || l == "..." || strings.HasPrefix(l, "--- ") || strings.HasPrefix(l, "... ")
		if !isMarker && strings.TrimSpace(l) != "" && !strings.HasPrefix(l, "#") {
			break // a setting: the tail starts after it
		}
		marker = marker || isMarker
		cut = i
	}
	if !marker {
		return data, nil
	}
	n := len(strings.Join(lines[:cut], ""))
	return data[:n], data[n:]
}

// installMark is the comment that says a config file is the copy `proxy
// install` made for the service name.
func installMark(name string) string {
	return installMarkPrefix + name + "`; `proxy uninstall --name " + name + "` removes this file."
}

// installMarkPrefix starts the mark of a copy for any service name.
const installMarkPrefix = "# Copied by `proxy install --name "

// serviceRuns is the command a proxy's service definition runs
// (service.Status.Runs): `proxy --service NAME run`.
const serviceRuns = "run"

// cmdControl is start, stop and uninstall.
func cmdControl(verb string, args []string, env Env) error {
	fs := newFlagSet(verb, env)
	name := fs.String("name", defaultServiceName, "service name")
	if err := clihelp.ParseNoArgs(fs, args); err != nil {
		return err
	}
	// Another program's service of that name, or an automator's, is
	// left alone.
	if st, err := service.Query(*name); err != nil {
		return err
	} else if err := st.Expect(serviceRuns); err != nil {
		return err
	}
	switch verb {
	case "start":
		if err := startable(*name); err != nil {
			return err
		}
		before, _ := service.Query(*name)
		cfgPath := filepath.Join(service.ConfigDir(*name), configFileName)
		cfg, cfgErr := validConfig(cfgPath)
		if before.Installed && !before.Running && cfgErr != nil && !errors.Is(cfgErr, os.ErrPermission) {
			// It would only log that, and be started again every few
			// seconds (a review: start said "not polled yet", exit 0).
			return fmt.Errorf("service %s was not started: %w; fix it, then `proxy start --name %s` again", *name, cfgErr, *name)
		}
		begin := time.Now()
		if err := service.Start(*name); err != nil {
			return err
		}
		if before.Running {
			// Nothing was started: say how the run already under way
			// is doing, not that a new one has not polled yet.
			if st, ok := waitFirstPoll(*name, time.Time{}, startWait); ok {
				fmt.Fprintf(env.Stdout, "Service %s is already running: it last polled the automator at %s as instance %s.\n", *name, st.LastPoll.Format(time.RFC3339), st.InstanceID)
			} else {
				fmt.Fprintf(env.Stdout, "Service %s is already running, but it has not polled the automator since it started. `proxy status --name %s` tells why, and where its log is.\n", *name, *name)
			}
			return nil
		}
		if st, ok := waitFirstPoll(*name, begin, startWait); ok {
			fmt.Fprintf(env.Stdout, "Started service %s: it polled the automator at %s as instance %s.\n", *name, st.LastPoll.Format(time.RFC3339), st.InstanceID)
			break
		}
		if cfgErr == nil {
			// Why, when the automator says: a token it refuses is no
			// start to report as under way (a review).
			if check := checkProfile(context.Background(), cfg, time.Now()); check.refused {
				return fmt.Errorf("started service %s, but it polls nothing: the automator refuses its config: %s; `proxy status --name %s` tells where its log is", *name, check.line, *name)
			}
		}
		fmt.Fprintf(env.Stdout, "Started service %s; it has not polled the automator yet. `proxy status --name %s` tells when it does, and where its log is.\n", *name, *name)
	case "stop":
		wasRunning, err := service.StopReported(*name)
		if err != nil {
			return err
		}
		if !wasRunning {
			fmt.Fprintf(env.Stdout, "Service %s is not running: nothing to stop.\n", *name)
			break
		}
		fmt.Fprintf(env.Stdout, "Stopped service %s.\n", *name)
		if n := spooled(service.StateDir(*name)); n > 0 {
			fmt.Fprintf(env.Stdout, "%d results of units it ran could not be posted and wait in %s: its next start posts them.\n", n, filepath.Join(service.StateDir(*name), agent.SpoolDirName))
		}
	case "uninstall":
		return uninstall(*name, env)
	}
	return nil
}

// spooled counts the results in the spool of stateDir, waiting to be
// posted (those of units whose scripts ran), or 0 when it cannot be read.
func spooled(stateDir string) int {
	if agent.CheckSpoolDir(stateDir) != nil {
		return 0
	}
	entries, _ := os.ReadDir(filepath.Join(stateDir, agent.SpoolDirName))
	n := 0
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".json") && !strings.HasPrefix(e.Name(), ".tmp-") {
			n++
		}
	}
	return n
}

// validConfig is the config at path, with its defaults, when it is valid,
// as `proxy run` would read it.
func validConfig(path string) (config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return cfg, err
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("its config %s is not valid: %s", path, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return cfg, nil
}

// startable refuses to start service name while a proxy that is not the
// service's holds its state directory (one run by hand on the service's
// config, say): the service would only log the refusal and be started
// again every few seconds by its service manager until that proxy stops.
// It looks without changing anything; a service not installed is left to
// service.Start to report.
func startable(name string) error {
	st, err := service.Query(name)
	if err != nil || !st.Installed {
		return nil
	}
	held := foreignHolder(name, st)
	switch {
	case held == nil:
		return nil
	case st.Running:
		return fmt.Errorf("%w; service %s runs, but its proxy cannot start until that one stops (its service manager tries again every few seconds)", held, name)
	}
	return fmt.Errorf("%w; service %s was not started: stop that proxy (it is not the service: one run by hand on the service's config, say), then `proxy start --name %s` again", held, name, name)
}

// foreignHolder is the proxy that holds the state directory of service
// name when it is not the service's own: nil when none holds it, when the
// service's proxy does, or when that cannot be told (the service's own
// lock decides then). It changes nothing in the directory.
func foreignHolder(name string, st service.Status) *agent.StateDirHeldError {
	var held *agent.StateDirHeldError
	if !errors.As(agent.CheckStateDir(service.StateDir(name)), &held) {
		return nil
	}
	if st.Running {
		if held.PID == 0 {
			return nil
		}
		if own, err := service.IsServiceProcess(name, held.PID); err != nil || own {
			return nil
		}
	}
	return held
}

// holderName names the holder of a service's state directory, by its pid
// when known.
func holderName(held *agent.StateDirHeldError) string {
	if held.PID > 0 {
		return fmt.Sprintf("pid %d, a proxy that is not this service", held.PID)
	}
	return "a proxy that is not this service"
}

// uninstall stops and removes the service, then the files install made:
// the copy of the config, the state file and their directories, unless they
// hold files of someone else's.
func uninstall(name string, env Env) error {
	if err := service.CheckName(name); err != nil {
		return err
	}
	definition := service.DefinitionFiles(name)
	err := service.Uninstall(name)
	notInstalled := errors.Is(err, service.ErrNotInstalled)
	if err != nil && !notInstalled {
		return err
	}
	stateDir, configDir := service.StateDir(name), service.ConfigDir(name)
	var removed, left []string
	if !notInstalled {
		for _, p := range definition {
			if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
				removed = append(removed, p)
			}
		}
	}
	rm := func(path string) {
		if err := os.Remove(path); err == nil {
			removed = append(removed, path)
		} else if !errors.Is(err, os.ErrNotExist) {
			left = append(left, fmt.Sprintf("%s (%v)", path, err))
		}
	}
	rmdir := func(dir string) {
		err := os.Remove(dir)
		switch {
		case err == nil:
			removed = append(removed, dir)
		case errors.Is(err, os.ErrNotExist):
		case service.IsDirNotEmpty(err):
			left = append(left, dir+" (it holds files `proxy install` did not make)")
		default:
			left = append(left, fmt.Sprintf("%s (%v)", dir, err))
		}
	}
	// /etc/NAME or /var/lib/NAME as a link the operator put there (to a
	// directory on another volume, say) is theirs: os.Remove would remove
	// the link. (A spool that is a link is not: the proxy uses none.)
	rmdirNotLink := func(dir string) {
		if fi, err := os.Lstat(dir); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			left = append(left, dir+" (a symbolic link, which `proxy install` did not make)")
			return
		}
		rmdir(dir)
	}
	cfgCopy := filepath.Join(configDir, configFileName)
	if notInstalled {
		// No service of that name: remove only what is visibly a leftover
		// of one, never a file that merely has the same path.
		if data, rerr := os.ReadFile(cfgCopy); rerr != nil || !strings.Contains(string(data), installMark(name)) {
			return err
		}
	}
	// A proxy still running on the state directory (one started by hand
	// on the service's config) keeps it, its status and spool: they are
	// removed only under the directory's lock.
	lock, lerr := lockToRemove(stateDir)
	var held *agent.StateDirHeldError
	switch {
	case errors.Is(lerr, os.ErrNotExist):
	case errors.As(lerr, &held):
		// The config copy stays too, so that uninstall, run again, knows
		// the rest for a leftover of this service.
		by := "a running proxy holds it"
		if held.PID > 0 {
			by = fmt.Sprintf("a running proxy, pid %d, holds it", held.PID)
		}
		left = append(left, fmt.Sprintf("%s and %s (%s: stop it, then uninstall again)", stateDir, cfgCopy, by))
	case lerr != nil:
		left = append(left, fmt.Sprintf("%s (%v)", stateDir, lerr))
	default:
		rm(filepath.Join(stateDir, agent.StateFileName))
		temps, _ := filepath.Glob(filepath.Join(stateDir, "."+agent.StateFileName+".*"))
		for _, p := range temps {
			rm(p)
		}
		// The spool exists only while results wait in it to be posted, or
		// lost polls to be reported (agent.LostPollsName), or while it
		// holds records the proxy read but could not decode, and set aside (*.bad),
		// which it will neither post nor report.
		spool := filepath.Join(stateDir, agent.SpoolDirName)
		var waiting []os.DirEntry
		if agent.CheckSpoolDir(stateDir) == nil {
			// Not through a link (removed below as the link it is):
			// nothing where one leads is the service's.
			waiting, _ = os.ReadDir(spool)
		}
		results, lost := 0, false
		var setAside []string
		for _, e := range waiting {
			name := e.Name()
			switch {
			case e.IsDir():
			case name == agent.LostPollsName:
				lost = true
			case strings.HasSuffix(name, ".bad"):
				setAside = append(setAside, filepath.Join(spool, name))
			case strings.HasPrefix(name, ".tmp-"):
				// A write interrupted before its rename: the proxy
				// removes it at its next start.
				rm(filepath.Join(spool, name))
			case strings.HasSuffix(name, ".json"):
				results++
			}
		}
		_ = lock.Release() // Windows removes no file that is open
		rm(filepath.Join(stateDir, agent.LockFileName))
		if results > 0 {
			left = append(left, fmt.Sprintf("%s (results of units this proxy ran that the automator has not accepted yet: %d; start the proxy again to post them, or delete them)", spool, results))
		}
		if lost {
			left = append(left, fmt.Sprintf("%s (polls whose answers this proxy never read, which the automator has not been told of yet: units it claimed for them fail when the proxy starts again, or time out if it is deleted)", spool))
		}
		if len(setAside) > 0 {
			left = append(left, fmt.Sprintf("%s (set aside as not decoding: the proxy will neither post nor report them, and the units they were for time out at their deadlines; its log said why when it set them aside; delete them)", strings.Join(setAside, ", ")))
		}
		if results == 0 && !lost && len(setAside) == 0 {
			rmdir(spool)
			rmdirNotLink(stateDir)
		}
	}
	if held == nil {
		rm(cfgCopy)
		rmdirNotLink(configDir)
	}
	if notInstalled && len(removed) == 0 && len(left) == 0 {
		return err
	}
	if notInstalled && len(removed) > 0 {
		fmt.Fprintf(env.Stdout, "Service %s was not installed; removed what was left of it:\n", name)
	} else if !notInstalled {
		fmt.Fprintf(env.Stdout, "Uninstalled service %s; removed:\n", name)
	}
	for _, p := range removed {
		fmt.Fprintf(env.Stdout, "  %s\n", p)
	}
	if log := service.KeptLog(name); log != "" && !notInstalled {
		fmt.Fprintf(env.Stdout, "kept:\n  %s (the service's log; an install of %s again writes on in it)\n", log, name)
	}
	if len(left) > 0 {
		return fmt.Errorf("left behind: %s", strings.Join(left, "; "))
	}
	return nil
}

// stateDirOfAProxy refuses a directory at dir that holds anything but
// what a proxy keeps in its state_dir: its status file (one a proxy
// wrote), its lock and the status file's temporary files, and its spool.
// Missing or empty, it is fine.
func stateDirOfAProxy(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var foreign []string
	for _, e := range entries {
		switch n := e.Name(); {
		case n == agent.LockFileName && e.Type().IsRegular(),
			strings.HasPrefix(n, "."+agent.StateFileName+".") && e.Type().IsRegular(),
			n == agent.SpoolDirName && e.IsDir():
		case n == agent.StateFileName && e.Type().IsRegular():
			if s, err := agent.ReadState(filepath.Join(dir, n)); err != nil || s.InstanceID == "" || s.StartedAt.IsZero() {
				foreign = append(foreign, n+" (not a proxy's)")
			}
		default:
			foreign = append(foreign, n)
		}
	}
	if len(foreign) == 0 {
		return nil
	}
	if len(foreign) > 5 {
		foreign = append(foreign[:5:5], "…")
	}
	return fmt.Errorf("%s exists and holds what a proxy's state directory does not: %s; install would make it the service's state_dir, which the service writes and uninstall removes", dir, strings.Join(foreign, ", "))
}

// lockToRemove takes the state directory of a service being uninstalled,
// so that what a running proxy uses is not removed: os.ErrNotExist when
// there is no such directory, a *agent.StateDirHeldError when a proxy holds
// it. The service was stopped just before; on Windows its process may take
// a moment more to end once the control manager says it stopped, so a
// holder is given a few seconds.
func lockToRemove(dir string) (*agent.StateLock, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, err
	}
	for end := time.Now().Add(uninstallLockWait); ; time.Sleep(100 * time.Millisecond) {
		lock, err := agent.LockStateDir(dir)
		if !errors.Is(err, agent.ErrStateDirHeld) || time.Now().After(end) {
			return lock, err
		}
	}
}

// cmdStatus reports the service: installed, running, started at boot, its
// config, and when it last polled the automator successfully.
func cmdStatus(args []string, env Env) error {
	fs := newFlagSet("status", env)
	name := fs.String("name", defaultServiceName, "service name")
	if err := clihelp.ParseNoArgs(fs, args); err != nil {
		return err
	}
	st, err := service.Query(*name)
	if err != nil {
		return err
	}
	if err := st.Expect(serviceRuns); err != nil {
		return err
	}
	if !st.Installed {
		return fmt.Errorf("service %s is not installed (%s)%s; install it with `proxy install --config FILE --name %s`", *name, st.Platform, service.InstalledHere(), *name)
	}
	now := time.Now()
	w := env.Stdout
	fmt.Fprintf(w, "service:        %s (%s, %s)\n", *name, st.Platform, st.Definition)
	running := yesNo(st.Running)
	if st.Detail != "" {
		running += " (" + st.Detail + ")"
	}
	fmt.Fprintf(w, "running:        %s\n", running)
	fmt.Fprintf(w, "starts at boot: %s\n", yesNo(st.BootStart))

	cfgPath := filepath.Join(service.ConfigDir(*name), configFileName)
	cfgOK, cfgUnreadable := false, false
	cfg, err := config.Load(cfgPath)
	switch {
	case errors.Is(err, os.ErrPermission):
		cfgUnreadable = true
		admin := "root"
		if runtime.GOOS == "windows" {
			admin = "an administrator"
		}
		fmt.Fprintf(w, "config:         %s (not readable by this user; run as %s to check it)\n", cfgPath, admin)
	case err != nil:
		fmt.Fprintf(w, "config:         %v\n", err)
	default:
		cfg.ApplyDefaults()
		if err := cfg.Validate(); err != nil {
			fmt.Fprintf(w, "config:         %s is not valid: %s\n", cfgPath, strings.ReplaceAll(err.Error(), "\n", "; "))
		} else {
			cfgOK = true
			fmt.Fprintf(w, "config:         %s (valid: instance %s, automator %s, scripts %s)\n", cfgPath, cfg.InstanceID, cfg.AutomatorURL, cfg.ScriptsDir)
			// What proxy run warns of as it starts.
			for _, why := range scriptenv.Allowlist(cfg.AllowedEnv).Useless() {
				fmt.Fprintf(w, "config:         allowed_env lists what no command may set: %s\n", why)
			}
			if scriptenv.Allowlist(cfg.AllowedEnv).AllowsAny() {
				fmt.Fprintf(w, "config:         %s\n", scriptenv.AnyWarning)
			}
		}
	}
	var check profileCheck
	if cfgOK {
		// A standby must run what the active instance runs: the digest
		// is the same on both when their scripts are.
		if n, digest, err := scriptsDigest(cfg.ScriptsDir); err != nil {
			fmt.Fprintf(w, "scripts:        %s: %v\n", cfg.ScriptsDir, err)
		} else {
			fmt.Fprintf(w, "scripts:        %d runnable in %s, digest %s (the same on each instance that runs the same scripts)\n", n, cfg.ScriptsDir, digest)
		}
		if loose := writableByOthersAs(cfg.ScriptsDir, cfg.StateDir); len(loose) > 0 {
			fmt.Fprintf(w, "scripts:        %s: %s\n", looseScriptsWarning, strings.Join(loose, "; "))
		}
		for _, t := range unrunnable(cfg.ScriptsDir, false) {
			fmt.Fprintf(w, "scripts:        %s: %s\n", t.warning, listed(t.scripts))
		}
		// A stopped standby's profile goes out of date without a sign
		// (a rotation, a deleted account): it is asked now, not at
		// failover.
		check = checkProfile(context.Background(), cfg, now)
		fmt.Fprintf(w, "automator:      %s\n", check.line)
		// The check dials with this shell's web-proxy settings, which may
		// not be the service's.
		envFile := service.EnvironmentFile(*name)
		if runtime.GOOS == "windows" {
			envFile = ""
		}
		addr, _, _ := cfg.Target() // valid
		fmt.Fprintf(w, "check env:      %s\n", checkEnvLine(os.Getenv, envFile, addr))
	}

	statePath := filepath.Join(service.StateDir(*name), agent.StateFileName)
	s, serr := agent.ReadState(statePath)
	switch {
	case errors.Is(serr, os.ErrNotExist):
		fmt.Fprintf(w, "last poll:      never (no %s yet)\n", statePath)
	case serr != nil:
		fmt.Fprintf(w, "last poll:      unknown (%v)\n", serr)
	case s.LastPoll.IsZero():
		fmt.Fprintf(w, "last poll:      never (instance %s)\n", s.InstanceID)
	default:
		fmt.Fprintf(w, "last poll:      %s (%s ago), instance %s\n", s.LastPoll.Format(time.RFC3339), ago(now, s.LastPoll), s.InstanceID)
	}
	if serr == nil {
		switch {
		case !s.StoppedAt.IsZero():
			fmt.Fprintf(w, "last run:       pid %d, version %s, from %s to %s\n", s.PID, s.Version, s.StartedAt.Format(time.RFC3339), s.StoppedAt.Format(time.RFC3339))
		case !s.StoppingAt.IsZero():
			fmt.Fprintf(w, "last run:       pid %d, version %s, since %s; stopping since %s, waiting for %d running units\n", s.PID, s.Version, s.StartedAt.Format(time.RFC3339), s.StoppingAt.Format(time.RFC3339), s.Running)
		default:
			fmt.Fprintf(w, "last run:       pid %d, version %s, since %s\n", s.PID, s.Version, s.StartedAt.Format(time.RFC3339))
		}
	}
	held := foreignHolder(*name, st)
	if held != nil {
		fmt.Fprintf(w, "state dir:      %s is held by %s: the service cannot run until it stops\n", held.Dir, holderName(held))
	}
	if n := spooled(service.StateDir(*name)); n > 0 && !st.Running {
		// Said, not only logged (a review: a stop that could not post a
		// result left it there without a word).
		fmt.Fprintf(w, "spool:          %d results of units this proxy ran wait in %s to be posted: its next start posts them (the automator refuses those whose units ended)\n", n, filepath.Join(service.StateDir(*name), agent.SpoolDirName))
	}
	fmt.Fprintf(w, "log:            %s\n", service.LogLocation(st))

	// A poll of this run: the state file keeps an earlier run's last poll,
	// which says nothing of a run started since (the automator down, or a
	// config it refuses, since).
	polling := serr == nil && !s.LastPoll.IsZero() && !s.LastPoll.Before(s.StartedAt) && now.Sub(s.LastPoll) < pollStale && s.StoppingAt.IsZero()
	switch {
	case held != nil && st.Running:
		fmt.Fprintf(w, "=> running, but its proxy cannot start: its state directory is held by %s; stop that proxy\n", holderName(held))
	case held != nil:
		fmt.Fprintf(w, "=> stopped; its state directory is held by %s: stop that proxy before `proxy start --name %s`\n", holderName(held), *name)
	case st.Running && check.refused:
		// Its last poll may be recent, but the automator refuses its
		// config now: it polls nothing from here on.
		fmt.Fprintln(w, "=> running, but the automator refuses its config now (automator: above): it polls nothing")
	case st.Running && polling:
		fmt.Fprintln(w, "=> active: running and polling the automator")
	case st.Running && serr == nil && s.LastPoll.Before(s.StartedAt) && now.Sub(s.StartedAt) < pollStale:
		fmt.Fprintf(w, "=> running since %s ago, and not polled the automator successfully yet: see its log if that lasts\n", ago(now, s.StartedAt))
	case st.Running:
		fmt.Fprintln(w, "=> running, but not polling the automator successfully: see its log")
	case cfgOK && check.refused:
		fmt.Fprintf(w, "=> stopped, and its config is out of date (automator: above): started, it would claim nothing; put the account's current profile in %s before a failover needs it\n", cfgPath)
	case cfgOK && check.stale:
		// A previous token, or keys of before a rotation: accepted until
		// the rotation's overlap ends (keys the account no longer has at
		// all are refused at the first poll, which the check cannot tell).
		fmt.Fprintf(w, "=> stopped, and its config is out of date (automator: above): started, it may claim units only until the rotation's overlap ends, and none after; put the account's current profile in %s before a failover needs it\n", cfgPath)
	case cfgOK && check.unreached && st.BootStart:
		// Not a standby: no failover to speak of (a review).
		fmt.Fprintf(w, "=> stopped and configured, but the automator is not reachable from here now: started, it would poll nothing until it is\n")
	case cfgOK && check.unreached:
		fmt.Fprintf(w, "=> stopped and configured, but the automator is not reachable from here now: a failover to it would poll nothing until it is\n")
	case cfgOK && st.BootStart:
		// Installed to run, not as a standby (--manual-start).
		fmt.Fprintf(w, "=> stopped but configured, and started at boot: `proxy start --name %s` makes it poll\n", *name)
	case cfgOK:
		fmt.Fprintf(w, "=> stopped but configured (a warm standby): `proxy start --name %s` makes it poll\n", *name)
	case cfgUnreadable:
		// Nothing says the config is wrong: this user cannot tell.
		fmt.Fprintln(w, "=> stopped; its config is not checked, as this user cannot read it: run `proxy status` as root to check it and the automator's answer")
	default:
		fmt.Fprintln(w, "=> stopped, and its config needs attention before it can start")
	}
	// Not running, and its last run neither stopped nor is stopping (a
	// windows service's stop under way is not running either): it was
	// killed, or crashed, or its host went down, and the service manager
	// did not start it again.
	if !st.Running && st.Detail != service.DetailStopping && held == nil && serr == nil && !s.StartedAt.IsZero() && s.StoppedAt.IsZero() {
		fmt.Fprintf(w, "=> its last run (pid %d, since %s) ended without a stop: killed, crashed, or its host went down; its log says more\n", s.PID, s.StartedAt.Format(time.RFC3339))
	}
	if st.Running && check.stale {
		fmt.Fprintf(w, "=> its config is out of date (automator: above): put the account's current profile in %s, then `proxy stop --name %s` and `proxy start --name %s`\n", cfgPath, *name, *name)
	}
	// A config put in place while the service runs (a new profile) is
	// read at the next start only: until then the proxy polls with the
	// one it started with, which the lines above do not describe.
	if st.Running && held == nil && serr == nil && s.StoppedAt.IsZero() && s.StoppingAt.IsZero() && configChanged(s, cfgPath) {
		fmt.Fprintf(w, "=> the config file changed after the running proxy read it (at its start, %s): restart the service to apply it (`proxy stop --name %s`, `proxy start --name %s`)\n", s.StartedAt.Format(time.RFC3339), *name, *name)
	}
	return nil
}

// configChanged says whether the config file at path is no longer the one
// the run that wrote s read at its start. It says no when it cannot tell:
// s records no config (a state file of an earlier proxy version) or
// another file, or path cannot be read (status run by a user who may not
// read it), or is larger than any config, read as config.Load reads one.
func configChanged(s agent.State, path string) bool {
	if s.ConfigSHA256 == "" || filepath.Clean(s.ConfigFile) != filepath.Clean(path) {
		return false
	}
	data, err := secretfile.ReadRegularFile(path, config.MaxFileSize)
	if err != nil {
		return false
	}
	return config.Digest(data) != s.ConfigSHA256
}

// waitFirstPoll waits up to d for the service's state file to record a
// successful poll of a run begun after since.
func waitFirstPoll(name string, since time.Time, d time.Duration) (agent.State, bool) {
	path := filepath.Join(service.StateDir(name), agent.StateFileName)
	for end := time.Now().Add(d); ; time.Sleep(100 * time.Millisecond) {
		st, err := agent.ReadState(path)
		if err == nil && !st.StartedAt.Before(since) && !st.LastPoll.Before(st.StartedAt) && st.StoppedAt.IsZero() {
			return st, true
		}
		if time.Now().After(end) {
			return st, false
		}
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func ago(now, t time.Time) time.Duration {
	d := now.Sub(t).Round(time.Second)
	if d < 0 {
		return 0
	}
	return d
}
