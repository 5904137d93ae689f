package cli

import (
	"bytes"
	"runtime"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/config"
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
// database of automator.yaml's db, and the binary the service runs, are
// refused there too.
func TestInstallRefusesASQLiteDatabaseOrBinaryInATemporaryDirectory(t *testing.T) {
	t.Parallel()
	cfg := config.Default("https://127.0.0.1:8443")
	cfg.DB = "sqlite:/tmp/automator.db"
	if err := checkNotTemporary("/usr/local/bin/automator", "/var/lib/automator", cfg); err == nil || !strings.Contains(err.Error(), "the SQLite database /tmp/automator.db is under") {
		t.Errorf("a SQLite database under /tmp: %v; want it refused", err)
	}
	cfg.DB = "postgres://db.example/automator"
	if err := checkNotTemporary("/tmp/go-build1/automator", "/var/lib/automator", cfg); err == nil || !strings.Contains(err.Error(), "the binary /tmp/go-build1/automator is under") {
		t.Errorf("a binary under /tmp: %v; want it refused", err)
	}
	if err := checkNotTemporary("/usr/local/bin/automator", "/var/lib/automator", cfg); err != nil {
		t.Errorf("a service outside the temporary directories: %v", err)
	}
}
