//go:build linux

package service

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSysVInstallLeavesAnotherProgramsPidAndLogFilesAlone: the SysV init
// script keeps its pid in /var/run/NAME.pid and its log in
// /var/log/NAME.log, and uninstall (or an install that fails) removes
// them. When a file of that path exists already (another daemon's pid
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
