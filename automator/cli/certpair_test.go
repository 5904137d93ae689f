package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/config"
)

// TestServeSaysHowToMendAKeyThatDoesNotMatchItsCertificate: `cert renew`
// puts the new key in place, then the new certificate, so a renewal cut
// short between the two (a crash, a power cut) leaves a pair that does not
// match, and serve refuses it. It says which files, and the command that
// makes a matching pair.
func TestServeSaysHowToMendAKeyThatDoesNotMatchItsCertificate(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	keyPath := filepath.Join(dir, config.FileKey)
	old, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCLI(t, "cert", "renew", "--data-dir", dir); code != 0 {
		t.Fatalf("cert renew: exit %d: %s", code, stderr)
	}
	if err := os.WriteFile(keyPath, old, 0o600); err != nil { // the certificate renewed, the key not
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, "serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0")
	if code != ExitError || !strings.Contains(stderr, config.FileKey) || !strings.Contains(stderr, "automator cert renew --data-dir "+dir) {
		t.Fatalf("serve: exit %d, stderr %q; want %d naming %s and `automator cert renew --data-dir %s`", code, stderr, ExitError, config.FileKey, dir)
	}
}
