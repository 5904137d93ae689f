package cli

import (
	"bytes"
	"crypto/tls"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/config"
)

// TestAFailedCertRenewChangesNeitherFileOfThePair: `cert renew` that
// cannot put its new certificate in place (its temporary file cannot be
// written, or server.pem cannot be replaced) must not leave its new key
// beside the old certificate, a pair the next serve refuses ("private key
// does not match public key"): server.key and server.pem stay as they were,
// byte for byte, no temporary file is left, and the error names what
// failed. Once the cause is gone, the same renewal succeeds.
func TestAFailedCertRenewChangesNeitherFileOfThePair(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		blocked string // made a directory holding a file
		want    string // in the error
	}{
		{"its temporary certificate cannot be written", config.FileCert + ".renew", config.FileCert + ".renew"},
		{"server.pem cannot be replaced", config.FileCert, "putting " + config.FileCert + " in place"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := initDir(t)
			keyPath, certPath := filepath.Join(dir, config.FileKey), filepath.Join(dir, config.FileCert)
			oldKey, err := os.ReadFile(keyPath)
			if err != nil {
				t.Fatal(err)
			}
			oldCert, err := os.ReadFile(certPath)
			if err != nil {
				t.Fatal(err)
			}
			blocked := filepath.Join(dir, c.blocked)
			if err := os.Remove(blocked); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(blocked, "x"), 0o700); err != nil {
				t.Fatal(err)
			}

			code, _, stderr := runCLI(t, "cert", "renew", "--data-dir", dir)
			if code != ExitError || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
				t.Fatalf("cert renew with %s a directory: exit %d, stderr %q; want exit %d, one line naming %q", c.blocked, code, stderr, ExitError, c.want)
			}
			if got, err := os.ReadFile(keyPath); err != nil || !bytes.Equal(got, oldKey) {
				t.Errorf("server.key after the failed renewal changed (%v): the new key beside the old certificate", err)
			}
			if c.blocked != config.FileCert {
				if got, err := os.ReadFile(certPath); err != nil || !bytes.Equal(got, oldCert) {
					t.Errorf("server.pem after the failed renewal changed (%v)", err)
				}
			}
			for _, pattern := range []string{"*.renew", "*.renew-old"} {
				leftovers, _ := filepath.Glob(filepath.Join(dir, pattern))
				leftovers = slices.DeleteFunc(leftovers, func(p string) bool { return p == blocked })
				if len(leftovers) > 0 {
					t.Errorf("the failed renewal left %v behind", leftovers)
				}
			}

			// The cause gone, the renewal is made.
			if err := os.RemoveAll(blocked); err != nil {
				t.Fatal(err)
			}
			if c.blocked == config.FileCert {
				if err := os.WriteFile(certPath, oldCert, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if code, _, stderr := runCLI(t, "cert", "renew", "--data-dir", dir); code != 0 {
				t.Fatalf("cert renew once the cause is gone: exit %d: %s", code, stderr)
			}
			if _, err := tls.LoadX509KeyPair(certPath, keyPath); err != nil {
				t.Errorf("the renewed pair does not load: %v", err)
			}
			if got, _ := os.ReadFile(keyPath); bytes.Equal(got, oldKey) {
				t.Errorf("server.key is the old key after the renewal")
			}
			if leftovers, _ := filepath.Glob(filepath.Join(dir, "*.renew*")); len(leftovers) > 0 {
				t.Errorf("the renewal left %v behind", leftovers)
			}
		})
	}
}
