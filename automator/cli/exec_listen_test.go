//go:build linux

package cli

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/internal/logtest"
	"github.com/opsgate/opsgate/internal/waittest"
)

// TestDataDirCommandsReachAServeListeningOnAnAddressItsCertificateOmits:
// serve listening on an address of its own (here 127.0.0.2, on a host its
// LAN address), which the certificate does not name, is reached by `work
// wait --data-dir` (as by exec): they check the certificate against the
// public URL's host, which it names.
func TestDataDirCommandsReachAServeListeningOnAnAddressItsCertificateOmits(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	var out, errb bytes.Buffer
	if code := Main(t.Context(), []string{"init", "--data-dir", dir, "--public-url", "https://automator.test:8443"}, Env{Stdout: &out, Stderr: &errb}); code != 0 {
		t.Fatalf("init: exit %d: %s", code, errb.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	log := &logtest.Buffer{}
	go func() {
		done <- Main(ctx, []string{"serve", "--data-dir", dir, "--listen", "127.0.0.2:0", "--http-listen", "127.0.0.1:0"}, Env{Stdout: io.Discard, Stderr: log})
	}()
	t.Cleanup(func() {
		cancel()
		if code := waittest.Recv(t, done, "serve to return after its context was cancelled"); code != 0 {
			t.Errorf("serve exited %d:\n%s", code, log)
		}
	})
	automatortest.WaitFor(t, 15*time.Second, "serve to write serving.yaml", func() bool {
		_, ok, _ := config.ReadServing(dir)
		return ok
	})
	errb.Reset()
	code := Main(t.Context(), []string{"work", "wait", "--data-dir", dir, "w_0123456789abcdef0123456789abcdef"}, Env{Stdout: &out, Stderr: &errb})
	if code != ExitNotAllSucceeded || !strings.Contains(errb.String(), "there is no such unit") {
		t.Fatalf("work wait on an unknown unit: exit %d, stderr %q; want %d and the automator's answer that there is no such unit", code, errb.String(), ExitNotAllSucceeded)
	}
}
