//go:build linux

package service

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSysVInstallLeavesAnotherProgramsPidAndLogFilesAlone: the SysV init
// script keeps its pid in /var/run/NAME.pid and its log in
// /var/log/NAME.log; uninstall (or an install that fails) removes the
// first and writes in the second. When a file of that path exists already (another daemon's pid
// file, a syslog file, such as cron's /var/run/crond.pid or
// /var/log/kern.log), install must refuse the name: otherwise `start` takes
// the other daemon for this service, `stop` sends it SIGTERM, and
// uninstall deletes its file. Needs root on a host where SysV is used.
func TestSysVInstallLeavesAnotherProgramsPidAndLogFilesAlone(t *testing.T) {
	name := sysvTestName(t)
	for _, p := range []string{filepath.Join(sysvPIDDir, name+".pid"), filepath.Join(sysvLogDir, name+".log")} {
		t.Run(filepath.Base(p), func(t *testing.T) {
			const theirs = "another program's file\n"
			if err := os.WriteFile(p, []byte(theirs), 0o644); err != nil {
				t.Fatal(err)
			}
			defer os.Remove(p)
			err := Install(Spec{Name: name, Description: "opsgate test", Executable: "/bin/sleep", Arguments: []string{"1000"}})
			if err == nil {
				defer Uninstall(name)
				if uerr := Uninstall(name); uerr != nil {
					t.Errorf("uninstall: %v", uerr)
				}
			}
			if err == nil || !strings.Contains(err.Error(), p) {
				t.Errorf("install of service %s with %s there already: %v; want it refused, naming the file", name, p, err)
			}
			if got, rerr := os.ReadFile(p); rerr != nil || string(got) != theirs {
				t.Errorf("%s after install (and uninstall): %q, %v; want it untouched", p, got, rerr)
			}
			if _, serr := os.Lstat(filepath.Join(sysvInitDir, name)); serr == nil {
				t.Errorf("%s exists after the refused install", filepath.Join(sysvInitDir, name))
				_ = Uninstall(name)
			}
		})
	}
}

// TestAnotherProgramsServiceIsLeftAlone: a service of that name that
// Install did not make (another program's init script) is reported but
// not asked (its script is not run), and Install, Start, Stop and
// Uninstall refuse it, saying so, without running it or touching its
// script or its rc.d link. Before, Uninstall deleted them both. Needs root
// on a host where SysV is used.
func TestAnotherProgramsServiceIsLeftAlone(t *testing.T) {
	name := sysvTestName(t)
	ran := filepath.Join(t.TempDir(), "ran")
	script := filepath.Join(sysvInitDir, name)
	theirs := "#!/bin/sh\n# another program's\necho \"$1\" >> " + ran + "\n"
	if err := os.WriteFile(script, []byte(theirs), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(script) })
	link := "/etc/rc2.d/S01" + name
	if err := os.Symlink("../init.d/"+name, link); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(link) })

	st, err := Query(name)
	if err != nil || !st.Installed || st.Runs != "" || st.Running || st.Definition != script {
		t.Errorf("Query: %+v, %v; want installed at %s, running nothing of ours", st, err, script)
	}
	spec := Spec{Name: name, Description: "opsgate test", Executable: "/bin/sleep", Arguments: []string{Flag, name, "run"}}
	for what, err := range map[string]error{
		"install":   Install(spec),
		"start":     Start(name),
		"stop":      Stop(name),
		"uninstall": Uninstall(name),
	} {
		if !errors.Is(err, ErrNotOurs) || !strings.Contains(err.Error(), script) {
			t.Errorf("%s: %v; want it refused (ErrNotOurs), naming %s", what, err, script)
		}
	}
	if got, err := os.ReadFile(script); err != nil || string(got) != theirs {
		t.Errorf("%s afterwards: %q, %v; want it untouched", script, got, err)
	}
	if _, err := os.Lstat(link); err != nil {
		t.Errorf("%s afterwards: %v; want it left", link, err)
	}
	if got, err := os.ReadFile(ran); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the script was run (%q, %v); want it never run", got, err)
	}
}

// sysvTestName skips the test unless it runs as root on a host where SysV
// init is used, and names a service no one else's test uses.
// TestSysVUninstallKeepsTheLogAndAnInstallAgainWritesOnInIt: uninstall
// removes the pid file but keeps the service's log, the only record on a
// host without syslog of what the service did (a failover, before the
// standby is installed again for good), with a last line that says so, in
// the log's format; KeptLog names it. An install of the same name takes
// that log for its own and writes on in it, where one of another program
// (TestSysVInstallLeavesAnotherProgramsPidAndLogFilesAlone) is refused.
// Before, uninstall deleted it. Needs root on a host where SysV is used.
func TestSysVUninstallKeepsTheLogAndAnInstallAgainWritesOnInIt(t *testing.T) {
	name := sysvTestName(t)
	log := filepath.Join(sysvLogDir, name+".log")
	t.Cleanup(func() {
		_ = Uninstall(name)
		_ = os.Remove(log)
	})
	spec := Spec{Name: name, Description: "opsgate test", Executable: "/bin/sleep", Arguments: []string{Flag, name, "run"}}
	for i, c := range []struct{ line, want string }{
		{"2026-12-07T08:00:00+0000 the service's own line\n", "^[0-9T:+-]+ " + regexp.QuoteMeta(keptLogNote(name)) + "$"},
		{`{"time":"2026-12-07T08:00:00Z","level":"INFO","msg":"the service's own record"}` + "\n", `^\{"time":"[0-9T:Z-]+","level":"INFO","msg":"` + regexp.QuoteMeta(keptLogNote(name)) + `"\}$`},
		// A record longer than the first read of the log's end: JSON
		// still.
		{`{"time":"2026-12-07T08:00:00Z","level":"INFO","msg":"` + strings.Repeat("x", 5000) + `"}` + "\n", `^\{"time":"[0-9T:Z-]+","level":"INFO","msg":"` + regexp.QuoteMeta(keptLogNote(name)) + `"\}$`},
		// A service killed in the middle of a record: the note on a
		// line of its own.
		{`{"time":"2026-12-07T08:00:00Z","level":"INFO","msg":"cut`, `^\{"time":"[0-9T:Z-]+","level":"INFO","msg":"` + regexp.QuoteMeta(keptLogNote(name)) + `"\}$`},
	} {
		if err := Install(spec); err != nil {
			t.Fatalf("install %d: %v", i+1, err)
		}
		if err := Start(name); err != nil {
			t.Fatal(err)
		}
		if err := Stop(name); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatalf("the service's log after a start: %v", err)
		}
		if _, err := f.WriteString(c.line); err != nil {
			t.Fatal(err)
		}
		f.Close()
		before, _ := os.ReadFile(log)
		if err := Uninstall(name); err != nil {
			t.Fatalf("uninstall %d: %v", i+1, err)
		}
		if _, err := os.Lstat(filepath.Join(sysvPIDDir, name+".pid")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("pid file after uninstall: %v; want it removed", err)
		}
		after, err := os.ReadFile(log)
		lines := strings.Split(strings.TrimSuffix(string(after), "\n"), "\n")
		last := lines[len(lines)-1]
		if err != nil || (string(after) != string(before)+last+"\n" && string(after) != string(before)+"\n"+last+"\n") {
			t.Fatalf("log after uninstall %d: %q, %v; want what it held, and a line more", i+1, after, err)
		}
		if !regexp.MustCompile(c.want).MatchString(last) {
			t.Errorf("log's last line after uninstall %d: %q; want it to match %s", i+1, last, c.want)
		}
		if strings.HasSuffix(string(before), "\n") == strings.HasPrefix(strings.TrimPrefix(string(after), string(before)), "\n") {
			t.Errorf("log after uninstall %d: %q; want the note on a line of its own, after a newline only where the log had none at its end", i+1, after)
		}
		if got := KeptLog(name); got != log {
			t.Errorf("KeptLog after uninstall %d: %q, want %s", i+1, got, log)
		}
	}
	// A kept log whose last line another hand wrote is not taken for the
	// service's: install refuses it as another program's, also when that
	// line merely ends with the note (a syslog file's, written with
	// logger(1) by anyone).
	for _, last := range []string{"someone else's line\n", "2026-12-07T09:00:00.123456+00:00 vm someuser: " + keptLogNote(name) + "\n"} {
		if err := os.WriteFile(log, []byte(last), 0o640); err != nil {
			t.Fatal(err)
		}
		if err := Install(spec); err == nil || !strings.Contains(err.Error(), log) {
			t.Errorf("install over a log whose last line is %q: %v; want it refused, naming %s", last, err, log)
			_ = Uninstall(name)
		}
		if got := KeptLog(name); got != "" {
			t.Errorf("KeptLog of a log whose last line is %q: %q, want none", last, got)
		}
	}
}

func sysvTestName(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("installing an OS service needs root")
	}
	if p := Platform(); p != platformSysV {
		t.Skipf("the service manager here is %s, not SysV init", p)
	}
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "opsgate-test-" + hex.EncodeToString(b)
}
