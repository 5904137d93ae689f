package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/internal/clihelp"
	"github.com/opsgate/opsgate/proxy/service"
)

// TestInstallRefusesADataDirectoryInATemporaryDirectory: a service whose
// data directory is under /tmp (hidden by systemd's PrivateTmp, emptied at
// reboot) would fail at every start, or lose its queue at reboot; install
// refuses it, naming the directory, before anything is installed.
func TestInstallRefusesADataDirectoryInATemporaryDirectory(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	t.Cleanup(func() { // run as root, an install this test expects refused would be real
		if st, _ := service.Query("opsgate-test-tmp"); st.Installed {
			t.Error("the service was installed")
			_ = service.Uninstall("opsgate-test-tmp")
		}
	})
	var out, errb bytes.Buffer
	code := Main(t.Context(), []string{"install", "--data-dir", dir, "--name", "opsgate-test-tmp"}, Env{Stdout: &out, Stderr: &errb})
	if code != ExitError || !strings.Contains(errb.String(), "the data directory "+dir+" is under the temporary directory") {
		t.Fatalf("install of a data directory in a temporary directory: exit %d, stderr %q; want %d and the directory refused", code, errb.String(), ExitError)
	}
	if msg := errb.String(); runtime.GOOS != "windows" && (!strings.Contains(msg, "; move it under /var/lib\n") || strings.Contains(msg, "/usr/local/bin")) {
		t.Errorf("install of a data directory in a temporary directory: %q; want it told where data belongs, not where a binary does", msg)
	}
	if strings.Contains(out.String(), "Installed") {
		t.Errorf("install says it installed the service: %q", out.String())
	}
}

// TestInstallRefusesASQLiteDatabaseOrBinaryInATemporaryDirectory: the
// database of automator.yaml's db or of --db, and the binary the service
// runs, are refused there too, naming where the database was named.
func TestInstallRefusesASQLiteDatabaseOrBinaryInATemporaryDirectory(t *testing.T) {
	t.Parallel()
	cfg := config.Default("https://127.0.0.1:8443")
	cfg.DB = "sqlite:/tmp/automator.db"
	if err := checkNotTemporary("/usr/local/bin/automator", "/var/lib/automator", "db in /var/lib/automator/automator.yaml", cfg); err == nil || !strings.Contains(err.Error(), "the SQLite database /tmp/automator.db is under") {
		t.Errorf("a SQLite database under /tmp: %v; want it refused", err)
	}
	// Named by --db, the refusal says so, not automator.yaml.
	if err := checkNotTemporary("/usr/local/bin/automator", "/var/lib/automator", "--db", cfg); err == nil || !strings.HasPrefix(err.Error(), "--db: the SQLite database /tmp/automator.db is under") {
		t.Errorf("--db of a SQLite database under /tmp: %v; want it refused, naming --db", err)
	}
	cfg.DB = "postgres://db.example/automator"
	if err := checkNotTemporary("/tmp/go-build1/automator", "/var/lib/automator", "db in /var/lib/automator/automator.yaml", cfg); err == nil || !strings.Contains(err.Error(), "the binary /tmp/go-build1/automator is under") {
		t.Errorf("a binary under /tmp: %v; want it refused", err)
	}
	if err := checkNotTemporary("/usr/local/bin/automator", "/var/lib/automator", "db in /var/lib/automator/automator.yaml", cfg); err != nil {
		t.Errorf("a service outside the temporary directories: %v", err)
	}
}

// TestInstallGivesTheServiceItsDB: `install --db DSN` writes a service
// whose serve is given that --db, so a serve that runs on another database
// than automator.yaml's can be installed as it is run by hand. Checked on
// what install writes, rendered from the spec it builds, without
// installing: the systemd unit's ExecStart, the SysV script, and the
// command line kardianos gives the Windows service manager (which cannot
// run here), the spec's Arguments. Without --db, none is written.
func TestInstallGivesTheServiceItsDB(t *testing.T) {
	t.Parallel()
	const dsn = "postgres://automator@db.example/automator?sslmode=verify-full"
	spec := installSpec("automator", "/usr/local/bin/automator", "/var/lib/automator", dsn, config.Config{DB: dsn}, nil, false)
	if got, ok := clihelp.FlagValue(spec.Arguments, "db"); !ok || got != dsn || spec.Arguments[2] != "serve" {
		t.Errorf("the service's command line: %q; want serve given --db %s", spec.Arguments, dsn)
	}
	const execStart = "\nExecStart=/usr/local/bin/automator --service automator serve --data-dir /var/lib/automator --db \"" + dsn + "\"\n"
	if unit := service.SystemdUnit(spec); !strings.Contains(unit, execStart) {
		t.Errorf("the systemd unit:\n%s\nwant the line %q", unit, strings.TrimSpace(execStart))
	}
	if script := service.SysVScript(spec); !strings.Contains(script, "'--data-dir' '/var/lib/automator' '--db' '"+dsn+"'") {
		t.Errorf("the SysV script:\n%s\nwant serve given --db %s", script, dsn)
	}

	spec = installSpec("automator", "/usr/local/bin/automator", "/var/lib/automator", "", config.Config{DB: "automator.db"}, nil, false)
	if _, ok := clihelp.FlagValue(spec.Arguments, "db"); ok {
		t.Errorf("the service's command line without --db: %q; want no --db", spec.Arguments)
	}
}

// TestInstallRefusesADBHoldingAPassword: the service's command line is in
// its definition, which every user of the host can read, so a --db holding
// a password (in the URL's user, as a password or an sslpassword
// parameter) is refused before anything is installed, without printing
// the password, and the refusal says where the password goes instead.
func TestInstallRefusesADBHoldingAPassword(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	t.Cleanup(func() { // run as root, an install this test expects refused would be real
		if st, _ := service.Query("opsgate-test-dbpass"); st.Installed {
			t.Error("the service was installed")
			_ = service.Uninstall("opsgate-test-dbpass")
		}
	})
	for _, c := range []struct{ dsn, env string }{
		{"postgres://automator:s3cret@db.example/automator", "PGPASSWORD"},
		{"postgresql://automator@db.example/automator?password=s3cret", "PGPASSWORD"},
		{"postgres://automator@db.example/automator?sslcert=c.pem&sslkey=k.pem&sslpassword=s3cret", "PGSSLPASSWORD"},
	} {
		dsn := c.dsn
		var out, errb bytes.Buffer
		code := Main(t.Context(), []string{"install", "--data-dir", dir, "--name", "opsgate-test-dbpass", "--db", dsn}, Env{Stdout: &out, Stderr: &errb})
		msg := errb.String()
		if code != ExitError || !strings.Contains(msg, "password") || strings.Contains(msg, "s3cret") || strings.Contains(out.String(), "s3cret") {
			t.Errorf("install --db %s: exit %d, stderr %q; want %d, the password refused and not printed", dsn, code, msg, ExitError)
		}
		want := "db of " + filepath.Join(dir, config.FileConfig)
		if runtime.GOOS != "windows" {
			want = c.env + "=... in /etc/default/opsgate-test-dbpass"
		}
		if !strings.Contains(msg, want) {
			t.Errorf("install --db %s: %q; want it told where the password goes: %s", dsn, msg, want)
		}
	}
	// A URL without a password goes on to the checks that follow (here,
	// the data directory under the temporary directory).
	var out, errb bytes.Buffer
	code := Main(t.Context(), []string{"install", "--data-dir", dir, "--name", "opsgate-test-dbpass", "--db", "postgres://automator@db.example/automator"}, Env{Stdout: &out, Stderr: &errb})
	if code != ExitError || strings.Contains(errb.String(), "password") || !strings.Contains(errb.String(), "the data directory "+dir+" is under the temporary directory") {
		t.Errorf("install --db without a password: exit %d, stderr %q; want it past the --db check, refused for the data directory", code, errb.String())
	}
}

// TestInstallWritesTheAbsoluteSQLitePathServeOpens: a relative SQLite
// --db means, for install as for serve and every other command given it, a
// file relative to the data directory; install writes that file's absolute
// path into the service's command line (a "sqlite:" prefix resolved too),
// so the definition says which file the service opens. A PostgreSQL URL is
// written as given.
func TestInstallWritesTheAbsoluteSQLitePathServeOpens(t *testing.T) {
	t.Parallel()
	dir := filepath.FromSlash("/var/lib/automator")
	for _, c := range []struct{ db, want string }{
		{"automator.db", filepath.Join(dir, "automator.db")},
		{"sqlite:sub/../other.db", filepath.Join(dir, "other.db")},
		{filepath.FromSlash("/srv/db/automator.db"), filepath.FromSlash("/srv/db/automator.db")},
		{"postgres://automator@db.example/automator", "postgres://automator@db.example/automator"},
	} {
		cfg := config.Default("https://127.0.0.1:8443")
		cfg.DB = c.db
		spec := installSpec("automator", "/usr/local/bin/automator", dir, c.db, cfg, nil, false)
		if got, _ := clihelp.FlagValue(spec.Arguments, "db"); got != c.want {
			t.Errorf("install --db %s: the service's serve is given --db %q; want %q", c.db, got, c.want)
		}
	}
}

// TestInstallKeepsASQLiteDatabaseOutsideTheDataDirectoryWritable: under
// the systemd hardening (ProtectSystem=full: /etc, /usr and /boot
// read-only) only the unit's ReadWritePaths stay writable; a SQLite
// database outside the data directory, named by --db or by db in
// automator.yaml, has its directory there too (SQLite creates its -wal,
// -shm and journal files beside it, serve its lock). One inside the data
// directory, and a PostgreSQL URL, add nothing.
func TestInstallKeepsASQLiteDatabaseOutsideTheDataDirectoryWritable(t *testing.T) {
	t.Parallel()
	const dir = "/var/lib/automator"
	for _, c := range []struct {
		flag, yaml string
		want       []string
	}{
		{"/etc/opsgate/automator.db", "automator.db", []string{dir, "/etc/opsgate"}},
		{"", "sqlite:/etc/opsgate/automator.db", []string{dir, "/etc/opsgate"}},
		{"../shared/automator.db", "automator.db", []string{dir, "/var/lib/shared"}},
		{"", "sub/automator.db", []string{dir}},
		{"", "automator.db", []string{dir}},
		{dir + "/automator.db", "automator.db", []string{dir}},
		{"postgres://automator@db.example/automator", "automator.db", []string{dir}},
	} {
		cfg := config.Default("https://127.0.0.1:8443")
		cfg.DB = c.yaml
		if c.flag != "" {
			cfg.DB = c.flag
		}
		spec := installSpec("automator", "/usr/local/bin/automator", dir, c.flag, cfg, nil, false)
		if strings.Join(spec.WritablePaths, " ") != strings.Join(c.want, " ") {
			t.Errorf("--db %q, db %q in automator.yaml: writable paths %q; want %q", c.flag, c.yaml, spec.WritablePaths, c.want)
		}
		want := "\nReadWritePaths=" + strings.Join(c.want, " ") + "\n"
		if unit := service.SystemdUnit(spec); !strings.Contains(unit, want) {
			t.Errorf("--db %q, db %q in automator.yaml: the systemd unit:\n%s\nwant the line %q", c.flag, c.yaml, unit, strings.TrimSpace(want))
		}
	}
}

// TestInstallRefusesAMissingSQLiteDatabase: serve refuses a SQLite
// database that is missing at every start (an empty one is not made in its
// place), so install refuses it first, naming the file it resolved (a
// relative --db against the data directory), before anything is installed.
func TestInstallRefusesAMissingSQLiteDatabase(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	t.Cleanup(func() { // run as root, an install this test expects refused would be real
		if st, _ := service.Query("opsgate-test-nodb"); st.Installed {
			t.Error("the service was installed")
			_ = service.Uninstall("opsgate-test-nodb")
		}
	})
	var out, errb bytes.Buffer
	code := Main(t.Context(), []string{"install", "--data-dir", dir, "--name", "opsgate-test-nodb", "--db", "moved.db"}, Env{Stdout: &out, Stderr: &errb})
	if want := "the database " + filepath.Join(dir, "moved.db") + " is missing"; code != ExitError || !strings.Contains(errb.String(), want) {
		t.Fatalf("install --db of a missing file: exit %d, stderr %q; want %d and %q", code, errb.String(), ExitError, want)
	}
}

// TestAutomatorCommandsLeaveAProxysServiceAlone: `automator stop`, `start`,
// `status`, `uninstall` and `install` of a service that runs a proxy
// refuse it, saying whose it is, and leave it installed. Needs root.
func TestAutomatorCommandsLeaveAProxysServiceAlone(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("installing an OS service needs root")
	}
	name := "opsgate-test-proxys"
	spec := service.Spec{Name: name, Description: "opsgate test", Executable: "/bin/sleep", Arguments: []string{service.Flag, name, "run", "--config", "/etc/" + name + "/proxy.yaml"}, ManualStart: true}
	if err := service.Install(spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = service.Uninstall(name) })
	dir := t.TempDir()
	for _, args := range [][]string{{"stop"}, {"start"}, {"status"}, {"uninstall"}, {"install", "--data-dir", dir}} {
		var stdout, stderr bytes.Buffer
		code := Main(t.Context(), append(args, "--name", name), Env{Stdout: &stdout, Stderr: &stderr})
		if code != ExitError || !strings.Contains(stderr.String(), "is a proxy's (it runs `run`), not an automator's") {
			t.Errorf("automator %s of a proxy's service: exit %d, stderr %q; want %d, saying whose it is", args[0], code, stderr.String(), ExitError)
		}
	}
	if st, err := service.Query(name); err != nil || !st.Installed || st.Runs != "run" || st.Running {
		t.Errorf("the proxy's service afterwards: %+v, %v; want it installed, not started", st, err)
	}
}
