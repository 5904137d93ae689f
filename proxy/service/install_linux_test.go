//go:build linux

package service

import (
	"crypto/rand"
	"encoding/hex"
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
	name := "opsgate-test-" + hex.EncodeToString(b)
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
