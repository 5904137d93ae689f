package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store/pgstore"
	"github.com/opsgate/opsgate/internal/clihelp"
	"github.com/opsgate/opsgate/proxy/service"
)

const (
	// defaultServiceName is the service of `automator install` without
	// --name.
	defaultServiceName = "automator"
	// serveStopTimeout bounds a service stop: serve drains gRPC for 5 s and
	// HTTP for 2 s.
	serveStopTimeout = 30 * time.Second
)

// serviceCommand is install, start, stop, status and uninstall: `automator
// serve` as an OS service.
func serviceCommand(verb string, args []string, env Env) error {
	fs := newFlags(verb, env)
	name := fs.String("name", defaultServiceName, "service name")
	var dir, db, userName *string
	var manual *bool
	if verb == "install" {
		dir = fs.String("data-dir", "", "the automator's data directory (made by init)")
		db = fs.String("db", "", "the --db of the service's serve: its database DSN, overriding db in automator.yaml: a SQLite file (relative to the data directory, written as its absolute path), or a PostgreSQL URL without a password, which the service definition would show to every user of the host")
		userName = fs.String("user", "", "run the service as this existing, unprivileged user who owns the data directory (Linux; default root)")
		manual = fs.Bool("manual-start", false, "do not start the service at boot")
	}
	if err := clihelp.ParseNoArgs(fs, args); err != nil {
		return err
	}
	if err := service.CheckName(*name); err != nil {
		return fmt.Errorf("--name: %w", err)
	}
	// Another program's service of that name, or a proxy's, is left
	// alone.
	if st, err := service.Query(*name); err != nil {
		return err
	} else if err := st.Expect(serviceRuns); err != nil {
		return err
	}
	switch verb {
	case "install":
		return installService(*name, *dir, *db, *userName, *manual, env)
	case "start":
		before, _ := service.Query(*name)
		if err := startableServe(before); err != nil {
			return err
		}
		if err := service.Start(*name); err != nil {
			return err
		}
		if before.Running {
			// Nothing was started: say so, and how the serve already
			// under way is doing, as the proxy's start does.
			if s, ok, _ := waitServing(*name, serveStartWait); ok {
				fmt.Fprintf(env.Stdout, "Service %s is already running: it serves gRPC on %s, HTTP on %s.\n", *name, s.GRPC, s.HTTP)
			} else {
				fmt.Fprintf(env.Stdout, "Service %s is already running, but it does not serve yet. `automator status --name %s` tells how it is doing, and where its log is.\n", *name, *name)
			}
			return nil
		}
		switch s, ok, known := waitServing(*name, serveStartWait); {
		case ok:
			fmt.Fprintf(env.Stdout, "Started service %s: it serves gRPC on %s, HTTP on %s.\n", *name, s.GRPC, s.HTTP)
		case known:
			fmt.Fprintf(env.Stdout, "Started service %s; it does not serve yet. `automator status --name %s` tells how it is doing, and where its log is.\n", *name, *name)
		default:
			fmt.Fprintf(env.Stdout, "Started service %s.\n", *name)
		}
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
	case "status":
		st, err := service.Query(*name)
		if err != nil {
			return err
		}
		if !st.Installed {
			return fmt.Errorf("service %s is not installed (%s)%s; install it with `automator install --data-dir DIR --name %s`", *name, st.Platform, service.InstalledHere(), *name)
		}
		running := yesNo(st.Running)
		if st.Detail != "" {
			running += " (" + st.Detail + ")"
		}
		fmt.Fprintf(env.Stdout, "service:        %s (%s, %s)\n", *name, st.Platform, st.Definition)
		fmt.Fprintf(env.Stdout, "running:        %s\n", running)
		if st.Running {
			if serving := serveState(*name); serving != "" {
				fmt.Fprintf(env.Stdout, "serving:        %s\n", serving)
			}
		}
		fmt.Fprintf(env.Stdout, "starts at boot: %s\n", yesNo(st.BootStart))
		fmt.Fprintf(env.Stdout, "log:            %s\n", service.LogLocation(st))
	case "uninstall":
		if err := service.Uninstall(*name); err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "Uninstalled service %s; its data directory is untouched.\n", *name)
		if log := service.KeptLog(*name); log != "" {
			fmt.Fprintf(env.Stdout, "Its log is kept: %s (an install of %s again writes on in it).\n", log, *name)
		}
	}
	return nil
}

// serviceRuns is the command an automator's service definition runs
// (service.Status.Runs): `automator --service NAME serve`.
const serviceRuns = "serve"

// installService installs the service that runs `automator serve
// --data-dir DIR`, with `--db DSN` when db is given. The data directory
// stays where it is: install only refers to it (and keeps it writable
// under the systemd hardening).
func installService(name, dir, db, userName string, manual bool, env Env) error {
	if err := requireFlag("data-dir", dir); err != nil {
		return err
	}
	if err := checkServiceDB(name, dir, db); err != nil {
		return err
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	cfg, err := config.Load(dir)
	if err != nil {
		return err
	}
	src := filepath.Join(dir, config.FileConfig)
	if db != "" {
		cfg.DB = db
		src += " or --db"
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid settings in %s: %w", src, err)
	}
	// serve refuses a missing SQLite database at every start.
	if err := sqliteExists(dir, cfg); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this program's path: %w", err)
	}
	dbFrom := "db in " + filepath.Join(dir, config.FileConfig)
	if db != "" {
		dbFrom = "--db"
	}
	if err := checkNotTemporary(exe, dir, dbFrom, cfg); err != nil {
		return err
	}
	var u *service.User
	if userName != "" {
		if u, err = service.LookupUser(userName); err != nil {
			return fmt.Errorf("--user: %w", err)
		}
		if err := service.CheckOwner(dir, u); err != nil {
			return fmt.Errorf("--user: %w", err)
		}
		// A service that cannot reach its binary or its files would only
		// fail at every start, and be started again.
		if err := checkServiceUserReach(u, exe, dir, cfg); err != nil {
			return fmt.Errorf("--user: %w", err)
		}
	}
	spec := installSpec(name, exe, dir, db, cfg, u, manual)
	if err := service.Install(spec); err != nil {
		return err
	}
	st, _ := service.Query(name)
	fmt.Fprintf(env.Stdout, "Installed service %s (%s): %s\n", name, st.Platform, st.Definition)
	fmt.Fprintf(env.Stdout, "  runs:           %s %s\n", spec.Executable, strings.Join(spec.Arguments, " "))
	fmt.Fprintf(env.Stdout, "  database:       %s\n", installedDB(dir, cfg))
	if st.Platform != "windows-service" {
		runAs := "root"
		if spec.User != "" {
			runAs = spec.User
		}
		fmt.Fprintf(env.Stdout, "  user:           %s\n", runAs)
	}
	fmt.Fprintf(env.Stdout, "  starts at boot: %s\n", yesNo(st.BootStart))
	fmt.Fprintf(env.Stdout, "It is stopped. Start it with `automator start --name %s`.\n", name)
	return nil
}

// installSpec is the service install writes: it runs exe as `automator
// --service NAME serve --data-dir DIR`, with `--db DSN` when db is given
// (checkServiceDB refused one holding a password), as u when u is not nil.
// dir is absolute, cfg the settings of automator.yaml. A SQLite db is
// written as the absolute path serve opens: a relative one is relative to
// the data directory, for serve as for every command given --db. The data
// directory stays writable under the systemd hardening, and so does the
// directory of a SQLite database outside it (db, or db in automator.yaml),
// where SQLite creates its -wal, -shm and journal files and serve its lock.
func installSpec(name, exe, dir, db string, cfg config.Config, u *service.User, manual bool) service.Spec {
	if db != "" {
		cfg.DB = db
	}
	writable := []string{dir}
	if !pgstore.IsDSN(cfg.DB) {
		file := filepath.Clean(cfg.DBPath(dir))
		if db != "" {
			db = file
		}
		if d := filepath.Dir(file); !within(dir, d) {
			writable = append(writable, d)
		}
	}
	args := []string{service.Flag, name, serviceRuns, "--data-dir", dir}
	if db != "" {
		args = append(args, "--db", db)
	}
	spec := service.Spec{
		Name:          name,
		Description:   fmt.Sprintf("opsgate automator %s: queues executeOnProxy work for proxies (data in %s)", name, dir),
		Executable:    exe,
		Arguments:     args,
		StopTimeout:   serveStopTimeout,
		WritablePaths: writable,
		ManualStart:   manual,
	}
	if u != nil {
		spec.User, spec.Group = u.Name, u.Group
	}
	return spec
}

// installedDB names the database the service's serve opens: a SQLite
// file by its absolute path, a PostgreSQL URL without its password.
func installedDB(dir string, cfg config.Config) string {
	if pgstore.IsDSN(cfg.DB) {
		return pgstore.Redact(cfg.DB)
	}
	return filepath.Clean(cfg.DBPath(dir))
}

// within reports whether path is dir or lies under it (both clean and
// absolute).
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// checkServiceDB refuses an install's --db that holds a secret: a
// password or an sslpassword of a PostgreSQL URL. The service's command
// line is in its definition, which every user of the host may read (a
// systemd unit and a SysV script are world-readable files; a Windows
// service's command line is shown to every user), and in the process list
// while it runs. The password belongs where the service reads it and
// others do not: PGPASSWORD in its environment file (Linux), or the URL
// in db of automator.yaml (mode 0600), the service installed without --db.
func checkServiceDB(name, dir, db string) error {
	secret, env := dbSecret(db)
	if secret == "" {
		return nil
	}
	where := fmt.Sprintf("keep the URL in db of %s (mode 0600) and install without --db", filepath.Join(dir, config.FileConfig))
	if runtime.GOOS != "windows" {
		where = fmt.Sprintf("leave it out of the URL and put %s=... in %s (mode 0600), whose variables the service gets, or %s", env, service.EnvironmentFile(name), where)
	}
	return fmt.Errorf("--db %s: the URL holds %s, which install would write into the service's command line, shown to every user of this host: %s", pgstore.Redact(db), secret, where)
}

// dbSecret names the secret a PostgreSQL URL db holds ("a password", "an
// sslpassword") and the environment variable that gives it instead, or is
// "" when it holds none (or db is a SQLite file).
func dbSecret(db string) (secret, env string) {
	if !pgstore.IsDSN(db) {
		return "", ""
	}
	u, err := url.Parse(db)
	if err != nil {
		return "", ""
	}
	q := u.Query()
	if _, ok := u.User.Password(); ok || q.Has("password") {
		return "a password", "PGPASSWORD"
	}
	if q.Has("sslpassword") {
		return "an sslpassword", "PGSSLPASSWORD"
	}
	return "", ""
}

// runService is `automator --service NAME serve ...`, the command line of
// the installed service: serve under the service manager, logging to the
// system log. Its error is logged there once, in serve's log format, and
// not printed again by Main (the service's stderr goes to the same log):
// it returns ExitError and no error.
func runService(ctx context.Context, name string, args []string, env Env) (int, error) {
	if len(args) == 0 || args[0] != "serve" {
		return 0, fmt.Errorf("%s %s: only `serve` runs as a service, got %q", service.Flag, name, args)
	}
	format := serveLogFormat(args[1:])
	err := service.Run(ctx, service.RunOptions{Name: name, StopTimeout: serveStopTimeout, Stderr: env.Stderr, LogFormat: format},
		func(ctx context.Context, log io.Writer) error {
			err := cmdServe(ctx, args[1:], Env{Stdin: env.Stdin, Stdout: env.Stdout, Stderr: log})
			if err != nil {
				newLogger(log, format).Error("serve ended", "service", name, "err", err)
				return errLogged{err}
			}
			return nil
		})
	if err == nil {
		return 0, nil
	}
	if !errors.As(err, new(errLogged)) {
		newLogger(env.Stderr, format).Error("the service ended", "service", name, "err", err)
	}
	return ExitError, nil
}

// errLogged is an error of the service's function that it logged already.
type errLogged struct{ error }

func (e errLogged) Unwrap() error { return e.error }

// serveLogFormat is the log format serve will use with args, known before
// serve starts (and whether it starts): --log-format, else automator.yaml's
// log_format, else text. A line logged before serve's own logger exists,
// or about serve's end, is then of the same format as serve's lines.
func serveLogFormat(args []string) string {
	if f, ok := clihelp.FlagValue(args, "log-format"); ok {
		return f
	}
	if dir, ok := clihelp.FlagValue(args, "data-dir"); ok {
		if cfg, err := config.Load(dir); err == nil {
			return cfg.LogFormat
		}
	}
	return ""
}

// checkNotTemporary refuses to install a service whose binary, data
// directory or SQLite database lies in a temporary directory: the service
// could not see it (systemd's PrivateTmp), or would lose it at reboot.
// dbFrom says where the database was named: "--db", or db in
// automator.yaml.
func checkNotTemporary(exe, dir, dbFrom string, cfg config.Config) error {
	if err := service.CheckNotTemporary(service.Data, "the data directory", dir); err != nil {
		return err
	}
	if !pgstore.IsDSN(cfg.DB) {
		if err := service.CheckNotTemporary(service.Data, dbFrom+": the SQLite database", cfg.DBPath(dir)); err != nil {
			return err
		}
	}
	return service.CheckNotTemporary(service.Binary, "the binary", exe)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// startableServe refuses to start the stopped service st whose data
// directory's automator.yaml serve would refuse (a typo in a setting, a
// value of the wrong kind): it would only log that, and be started again
// every few seconds (a review: start said "it does not serve yet", exit
// 0). A data directory the definition does not name plainly, or this user
// may not read, is left to serve.
func startableServe(st service.Status) error {
	dir, _ := clihelp.FlagValue(st.Args, "data-dir")
	if st.Running || dir == "" {
		return nil
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil
	}
	// Its syntax and names only: the bounds of its values are checked by
	// serve, with the flags of the definition, which may override them.
	if _, err := config.Load(dir); err != nil && !errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("service %s was not started: %w; fix it, then `automator start --name %s` again", st.Name, err, st.Name)
	}
	return nil
}
