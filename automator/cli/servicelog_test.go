//go:build !windows

package cli

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/internal/logtest"
)

// runAsService runs `automator --service NAME serve ARGS...` in-process, as
// the service manager would, and returns its exit code and everything it
// wrote to stderr: with no system log, the service's log.
func runAsService(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(t.Context(), append([]string{"--service", "opsgate-test-log", "serve"}, args...), Env{Stdout: &out, Stderr: &errb})
	return code, errb.String()
}

// TestServiceLogsServesErrorOnce: when serve ends on an error as a
// service, the error is in the service's log once, not once by serve's
// wrapper and again by main (the service's stderr is the same log), both
// when serve fails before its logger exists and after.
func TestServiceLogsServesErrorOnce(t *testing.T) {
	t.Parallel()
	logtest.RequireNoSystemLog(t)
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a refused flag, before the logger", []string{"--listen", "no-port"}, "is not host:port"},
		{"a port taken, after the logger", []string{"--listen", held.Addr().String(), "--http-listen", "127.0.0.1:0"}, "address already in use"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := initDir(t)
			code, log := runAsService(t, append([]string{"--data-dir", dir}, tc.args...)...)
			if code != ExitError {
				t.Errorf("exit %d; want %d", code, ExitError)
			}
			if n := strings.Count(log, tc.want); n != 1 {
				t.Errorf("the error is in the service's log %d times; want once:\n%s", n, log)
			}
		})
	}
}

// TestServiceLogIsAllJSONInJSONMode: with log_format json, every line the
// service writes is a JSON record: its start-up warning that there is no
// system log, serve's own lines and the error serve ended on, whether the
// format comes from the flag or from automator.yaml.
func TestServiceLogIsAllJSONInJSONMode(t *testing.T) {
	t.Parallel()
	logtest.RequireNoSystemLog(t)
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	flagDir := initDir(t)
	fileDir := initDir(t)
	cfgPath := filepath.Join(fileDir, "automator.yaml")
	data, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	// A setting serve refuses, so that it ends before its logger exists.
	data = []byte(strings.Replace(string(data), "poll_window: 30s", "poll_window: 1ms", 1) + "log_format: json\n")
	if err := os.WriteFile(cfgPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][]string{
		"flag": {"--data-dir", flagDir, "--log-format", "json", "--listen", held.Addr().String(), "--http-listen", "127.0.0.1:0"},
		"file": {"--data-dir", fileDir},
	} {
		t.Run(name, func(t *testing.T) {
			_, log := runAsService(t, args...)
			logtest.AssertJSONLines(t, log, 2) // the warning and the error at least
		})
	}
}

// TestServeEndsWithAJSONRecordInJSONMode: `automator serve --log-format
// json` run by hand ends on an error with a JSON record, once, not a plain
// line after its JSON log.
func TestServeEndsWithAJSONRecordInJSONMode(t *testing.T) {
	t.Parallel()
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	dir := initDir(t)
	var out, errb bytes.Buffer
	code := Main(t.Context(), []string{"serve", "--data-dir", dir, "--log-format", "json", "--listen", held.Addr().String(), "--http-listen", "127.0.0.1:0"}, Env{Stdout: &out, Stderr: &errb})
	if code != ExitError {
		t.Errorf("exit %d; want %d", code, ExitError)
	}
	logtest.AssertJSONLines(t, errb.String(), 1)
	if n := strings.Count(errb.String(), "address already in use"); n != 1 {
		t.Errorf("the error is logged %d times; want once:\n%s", n, errb.String())
	}
}

// TestHTTPServerComplaintsAreServeLogLines: what the HTTP listener's server
// itself logs (an accept error when file descriptors run out, a handler's
// panic) is a line of serve's log, JSON in JSON mode, not a plain line on
// the process's stderr.
func TestHTTPServerComplaintsAreServeLogLines(t *testing.T) {
	t.Parallel()
	var log bytes.Buffer
	hs := newHTTPServer(http.NotFoundHandler(), newLogger(&log, "json"))
	if hs.ErrorLog == nil {
		t.Fatal("the HTTP server logs to the process's stderr")
	}
	hs.ErrorLog.Printf("http: Accept error: %v; retrying in %v", "accept tcp: too many open files", "5ms")
	logtest.AssertJSONLines(t, log.String(), 1)
	if !strings.Contains(log.String(), `"level":"ERROR"`) || !strings.Contains(log.String(), "too many open files") {
		t.Errorf("log %q: want the complaint at ERROR", log.String())
	}
}

// TestARefusedSettingIsBlamedOnTheFileOnlyWithoutFlags: serve refusing a
// setting names automator.yaml, and adds "or flags" only when flags
// override it (as the service's command line, with --data-dir alone,
// does not).
func TestARefusedSettingIsBlamedOnTheFileOnlyWithoutFlags(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	cfgPath := filepath.Join(dir, "automator.yaml")
	data, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, []byte(strings.Replace(string(data), "poll_window: 30s", "poll_window: 1ms", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "invalid settings in " + cfgPath + ": poll_window"},
		{[]string{"--listen", "127.0.0.1:0"}, "invalid settings in " + cfgPath + " or flags: poll_window"},
	} {
		var out, errb bytes.Buffer
		code := Main(t.Context(), append([]string{"serve", "--data-dir", dir}, tc.args...), Env{Stdout: &out, Stderr: &errb})
		if code != ExitError || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("serve %q: exit %d, %q; want %q", tc.args, code, errb.String(), tc.want)
		}
	}
}
