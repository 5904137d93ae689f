//go:build linux

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/config"
)

// TestServeWarnsOfASecretFileOthersMayRead: init writes the data
// directory's secrets 0600; serve started on one whose server key every
// user may read (a copy, an archive, an orchestrator's mount) says so at
// start, at WARN, naming the file, and serves all the same (a master key
// so is refused: crypto.ReadMasterKeyFile). So is a data directory every
// user may write. A tidy directory gets no such line.
func TestServeWarnsOfASecretFileOthersMayRead(t *testing.T) {
	t.Parallel()
	serving := func(s *served) string {
		automatortest.WaitFor(t, 15*time.Second, "serve's serving line", func() bool {
			return strings.Contains(s.log.String(), `"msg":"serving"`)
		})
		return s.log.String() // a warning comes before the serving line
	}
	if log := serving(serveInProcess(t)); strings.Contains(log, "holds a secret") {
		t.Errorf("serve on a directory as init made it warns of a secret:\n%s", log)
	}

	dir := initDir(t)
	key := filepath.Join(dir, config.FileKey)
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	log := serving(serveDirInProcess(t, dir))
	if !strings.Contains(log, `"level":"WARN","msg":"server.key holds a secret and is readable by every user (mode -rw-r--r--)`) || !strings.Contains(log, `"path":"`+key+`"`) {
		t.Errorf("serve on a directory whose master key every user may read: want a WARN naming it:\n%s", log)
	}
	if n := strings.Count(log, "holds a secret"); n != 1 {
		t.Errorf("%d lines warn of a secret, want 1 (the server key's):\n%s", n, log)
	}
	if strings.Contains(log, "data directory is writable") {
		t.Errorf("serve on a data directory only its owner may write warns of it:\n%s", log)
	}

	// A data directory every user may write: its keys may be replaced.
	dir = initDir(t)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if log := serving(serveDirInProcess(t, dir)); !strings.Contains(log, `"level":"WARN","msg":"the data directory is writable by every user (mode drwxrwxrwx)`) {
		t.Errorf("serve on a data directory every user may write: want a WARN saying so:\n%s", log)
	}
}
