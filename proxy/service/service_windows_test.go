package service

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc/mgr"
)

// These run on Windows only; make windows compiles them everywhere.

func TestConfigAndStateLiveUnderProgramData(t *testing.T) {
	pd := programData()
	if got := ConfigDir("proxy"); got != filepath.Join(pd, "proxy") {
		t.Errorf("ConfigDir = %s, want under %s", got, pd)
	}
	if got := StateDir("proxy"); got != filepath.Join(pd, "proxy", "state") {
		t.Errorf("StateDir = %s", got)
	}
}

// TestProtectLeavesOnlySystemAndAdministrators: the config directory holds
// the token and key; ProgramData would let every user read it.
func TestProtectLeavesOnlySystemAndAdministrators(t *testing.T) {
	dir, err := os.MkdirTemp("", "opsgate-acl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// As the owner we may always rewrite the access list, to clean up.
		sd, _ := windows.SecurityDescriptorFromString("D:(A;OICI;FA;;;WD)")
		dacl, _, _ := sd.DACL()
		_ = windows.SetNamedSecurityInfo(dir, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION, nil, nil, dacl, nil)
		os.RemoveAll(dir)
	})
	if err := protect(dir); err != nil {
		t.Fatal(err)
	}
	sd, err := windows.GetNamedSecurityInfo(dir, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		t.Fatal(err)
	}
	s := sd.String()
	if !strings.Contains(s, "D:P") || !strings.Contains(s, "(A;OICI;FA;;;SY)") || !strings.Contains(s, "(A;OICI;FA;;;BA)") || strings.Count(s, "(A;") != 2 {
		t.Fatalf("access list %s, want only SYSTEM and Administrators, not inherited", s)
	}
}

// openDACL gives dir back an access list that lets its owner remove it.
func openDACL(t *testing.T, dir string) {
	t.Cleanup(func() {
		sd, _ := windows.SecurityDescriptorFromString("D:(A;OICI;FA;;;WD)")
		dacl, _, _ := sd.DACL()
		_ = windows.SetNamedSecurityInfo(dir, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION, nil, nil, dacl, nil)
		os.RemoveAll(dir)
	})
}

func requireOnlySystemAndAdministrators(t *testing.T, dir string) {
	t.Helper()
	sd, err := windows.GetNamedSecurityInfo(dir, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		t.Fatal(err)
	}
	s := sd.String()
	if !strings.Contains(s, "D:P") || !strings.Contains(s, "(A;OICI;FA;;;SY)") || !strings.Contains(s, "(A;OICI;FA;;;BA)") || strings.Count(s, "(A;") != 2 {
		t.Fatalf("access list of %s: %s, want only SYSTEM and Administrators, not inherited", dir, s)
	}
}

// TestMakeDirMakesAPrivateFolderPrivateFromTheStart: the folder is made
// with its access list, not given it after a moment open to every user.
func TestMakeDirMakesAPrivateFolderPrivateFromTheStart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "private")
	openDACL(t, dir)
	if err := mkdirPrivate(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	requireOnlySystemAndAdministrators(t, dir)
}

// requireElevated skips a test of MakeDir on an existing private folder
// unless it runs elevated: once the folder is private, MakeDir looks at
// what it holds, which only SYSTEM and Administrators may now list (as
// install does, elevated).
func requireElevated(t *testing.T) {
	t.Helper()
	if !windows.GetCurrentProcessToken().IsElevated() {
		t.Skip("MakeDir lists an existing folder once it is private to SYSTEM and Administrators: it needs an elevated (administrator) prompt")
	}
}

// TestMakeDirMakesAnExistingPrivateFolderPrivateAgain: a config folder
// that exists already (made by this account) gets the private access list
// too, instead of being left as it is.
func TestMakeDirMakesAnExistingPrivateFolderPrivateAgain(t *testing.T) {
	requireElevated(t)
	dir := filepath.Join(t.TempDir(), "existing")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	openDACL(t, dir)
	created, err := MakeDir(dir, 0o755, nil, true)
	if err != nil || created {
		t.Fatalf("MakeDir of an existing folder: created %v, %v", created, err)
	}
	requireOnlySystemAndAdministrators(t, dir)
}

// TestMakeDirChecksWhatAnExistingPrivateFolderHolds: what was made in the
// folder while it was open is checked too, not only the folder: files and
// folders of this account pass (a state folder left by an earlier
// install), a junction (which any user may make where they may make a
// folder) is refused, naming it. A folder of another user is refused the
// same way, but making one needs a second account.
func TestMakeDirChecksWhatAnExistingPrivateFolderHolds(t *testing.T) {
	requireElevated(t)
	dir := filepath.Join(t.TempDir(), "existing")
	if err := os.MkdirAll(filepath.Join(dir, "state", "spool"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "state", "status.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	openDACL(t, dir)
	if created, err := MakeDir(dir, 0o755, nil, true); err != nil || created {
		t.Fatalf("MakeDir of a folder holding this account's files: created %v, %v", created, err)
	}
	junction := filepath.Join(dir, "state", "elsewhere")
	if out, err := exec.Command("cmd.exe", "/c", "mklink", "/J", junction, t.TempDir()).CombinedOutput(); err != nil {
		t.Skipf("mklink /J: %v: %s", err, out)
	}
	_, err := MakeDir(dir, 0o755, nil, true)
	if err == nil || !strings.Contains(err.Error(), junction) || !strings.Contains(err.Error(), "junction") {
		t.Fatalf("MakeDir of a folder holding a junction: %v, want it refused naming %s", err, junction)
	}
}

// TestPrivateFileIsNotReadableByUsers: the config copy is protected even in
// a folder that lets users read.
func TestPrivateFileIsNotReadableByUsers(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "proxy.yaml")
	if err := WriteNewFile(path, []byte("token: t\n"), 0o600, nil, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sd, _ := windows.SecurityDescriptorFromString("D:(A;;FA;;;WD)")
		dacl, _, _ := sd.DACL()
		_ = windows.SetNamedSecurityInfo(path, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION, nil, nil, dacl, nil)
	})
	sd, err := windows.GetNamedSecurityInfo(path, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		t.Fatal(err)
	}
	if s := sd.String(); !strings.Contains(s, "D:P") || strings.Count(s, "(A;") != 2 || !strings.Contains(s, ";;;SY)") || !strings.Contains(s, ";;;BA)") {
		t.Fatalf("access list %s, want only SYSTEM and Administrators, not inherited", s)
	}
}

// TestInstallSetsAutoStartAndRecovery installs a service (not started) and
// checks what the Service Control Manager recorded, and that stopping it
// while it is stopped succeeds. It needs an elevated prompt.
func TestInstallSetsAutoStartAndRecovery(t *testing.T) {
	if !windows.GetCurrentProcessToken().IsElevated() {
		t.Skip("installing a Windows service needs an elevated (administrator) prompt")
	}
	b := make([]byte, 3)
	rand.Read(b)
	name := "opsgate-test-" + hex.EncodeToString(b)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s := Spec{Name: name, Description: "opsgate test service", Executable: exe, Arguments: []string{Flag, name, "run"}}
	if err := Install(s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Uninstall(name) })
	st, err := Query(name)
	if err != nil || !st.Installed || st.Running || !st.BootStart || st.Platform != platformWindows {
		t.Fatalf("Query: %+v, %v; want installed, stopped, automatic start", st, err)
	}
	m, err := mgr.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Disconnect()
	ws, err := m.OpenService(name)
	if err != nil {
		t.Fatal(err)
	}
	actions, err := ws.RecoveryActions()
	if err != nil || len(actions) != 3 || actions[0].Type != mgr.ServiceRestart {
		t.Errorf("recovery actions %+v, %v; want three restarts", actions, err)
	}
	// A stop that reported an error is a stop, not a failure to recover from.
	if on, err := ws.RecoveryActionsOnNonCrashFailures(); err != nil || on {
		t.Errorf("recovery on non-crash failures: %v, %v; want false", on, err)
	}
	ws.Close()
	// As systemctl stop and the SysV script: stopping a stopped service is
	// no error.
	if err := Stop(name); err != nil {
		t.Errorf("Stop of the stopped service: %v", err)
	}
	if err := Uninstall(name); err != nil {
		t.Fatal(err)
	}
	if st, err := Query(name); err != nil || st.Installed {
		t.Fatalf("after Uninstall: %+v, %v", st, err)
	}
}
