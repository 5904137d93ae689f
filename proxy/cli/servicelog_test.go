//go:build !windows

package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/internal/logtest"
)

// writeConfig writes a proxy config of body and returns its path.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestServiceLogsItsErrorOnceInTheConfigsFormat: a proxy service that
// cannot start (here its scripts_dir is missing) says why in its log once,
// not once by the service and again by main (the service's stderr is the
// same log); with log_format json every line of it, the warning that there
// is no system log included, is a JSON record.
func TestServiceLogsItsErrorOnceInTheConfigsFormat(t *testing.T) {
	t.Parallel()
	logtest.RequireNoSystemLog(t)
	missing := filepath.Join(t.TempDir(), "no-scripts")
	profile := "automator_url: http://127.0.0.1:1\ntoken: t\nkey: " + testKey(t) + "\nscripts_dir: " + missing + "\n"
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			path := writeConfig(t, profile+"log_format: "+format+"\n")
			var stdout, stderr bytes.Buffer
			code := Main(t.Context(), []string{"--service", "opsgate-test-log", "run", "--config", path}, Env{Stdout: &stdout, Stderr: &stderr})
			log := stderr.String()
			if code != 1 {
				t.Errorf("exit %d; want 1", code)
			}
			if n := strings.Count(log, missing); n != 1 {
				t.Errorf("the error is in the service's log %d times; want once:\n%s", n, log)
			}
			if format == "json" {
				logtest.AssertJSONLines(t, log, 2)
			}
		})
	}
}

// TestRunEndsWithAJSONRecordInJSONMode: `proxy run --log-format json` that
// cannot start says why in one JSON record, not a plain line.
func TestRunEndsWithAJSONRecordInJSONMode(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "no-scripts")
	path := writeConfig(t, "automator_url: http://127.0.0.1:1\ntoken: t\nkey: "+testKey(t)+"\nscripts_dir: "+missing+"\n")
	var stdout, stderr bytes.Buffer
	if code := Main(t.Context(), []string{"run", "--config", path, "--log-format", "json"}, Env{Stdout: &stdout, Stderr: &stderr}); code != 1 {
		t.Errorf("exit %d; want 1", code)
	}
	logtest.AssertJSONLines(t, stderr.String(), 1)
	if n := strings.Count(stderr.String(), missing); n != 1 {
		t.Errorf("the error is logged %d times; want once:\n%s", n, stderr.String())
	}
}
