//go:build linux

package cli_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/cli"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/internal/closedport"
	"github.com/opsgate/opsgate/internal/pidtest"
	"github.com/opsgate/opsgate/internal/waittest"
)

// TestMain gives the tests that need one a PostgreSQL server (pgtest: the
// one AUTOMATOR_TEST_POSTGRES names, else a throwaway cluster), and fails
// the run if a test leaked a goroutine.
func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "automator/cli: leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}

type execResult struct {
	code           int
	stdout, stderr string
}

func execCLI(ctx context.Context, a *automatortest.Automator, server string, args ...string) execResult {
	if server == "" {
		server = a.URL()
	}
	var out, errb bytes.Buffer
	full := append([]string{"exec", "--server", server, "--api-key-file", a.APIKeyFile, "--ca", a.CAFile}, args...)
	code := cli.Main(ctx, full, cli.Env{Stdin: strings.NewReader("from stdin\n"), Stdout: &out, Stderr: &errb})
	return execResult{code, out.String(), errb.String()}
}

func startWithScripts(t *testing.T) *automatortest.Automator {
	a := automatortest.Start(t, automatortest.Options{})
	scripts := t.TempDir()
	automatortest.WriteScript(t, scripts, "exit.sh", `cat; echo "exiting $1" >&2; exit "$1"`)
	automatortest.WriteScript(t, scripts, "sleeper.sh", `sleep 60 &
echo "$! $$" > "$1.tmp" && mv "$1.tmp" "$1"
exec sleep 60`)
	a.StartProxy(t, automatortest.ProxyOptions{InstanceID: "a", ScriptsDir: scripts, MaxConcurrency: 8}).WaitPolling(t)
	return a
}

// `automator exec`, now on the Go client, keeps DESIGN.md's exit codes:
// the remote one, 124 timed out, 125 failed, 255 for its own errors, each
// with a one-line reason.
func TestExecExitCodes(t *testing.T) {
	t.Parallel()
	a := startWithScripts(t)
	ctx := context.Background()
	wrongKey := filepath.Join(t.TempDir(), "wrong.apikey")
	if err := os.WriteFile(wrongKey, []byte("oak_wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	oneLine := func(t *testing.T, r execResult, want string) {
		t.Helper()
		if strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, want) {
			t.Errorf("stderr %q: want one line containing %q", r.stderr, want)
		}
	}

	if r := execCLI(ctx, a, "", "--account", "acme", "--stdin", "-", "exit.sh", "42"); r.code != 42 || r.stdout != "from stdin\n" || r.stderr != "exiting 42\n" {
		t.Errorf("remote 42: %+v; want exit 42 with the remote stdout and stderr", r)
	}
	r := execCLI(ctx, a, "", "--account", "acme", "--timeout", "1s", "sleeper.sh", filepath.Join(t.TempDir(), "pids"))
	if r.code != cli.ExitTimeout {
		t.Errorf("timeout: %+v; want 124", r)
	}
	oneLine(t, r, "timed out")
	r = execCLI(ctx, a, "", "--account", "acme", "nope.sh")
	if r.code != cli.ExitFailed {
		t.Errorf("unknown script: %+v; want 125", r)
	}
	oneLine(t, r, "nope.sh")
	r = execCLI(ctx, a, "", "--account", "nobody", "exit.sh", "0")
	if r.code != cli.ExitError {
		t.Errorf("unknown account: %+v; want 255", r)
	}
	oneLine(t, r, `"nobody"`)
	var errb bytes.Buffer
	code := cli.Main(ctx, []string{"exec", "--server", a.URL(), "--api-key-file", wrongKey, "--ca", a.CAFile, "--account", "acme", "exit.sh", "0"},
		cli.Env{Stdin: strings.NewReader(""), Stdout: &bytes.Buffer{}, Stderr: &errb})
	if code != cli.ExitError {
		t.Errorf("wrong API key: exit %d; want 255", code)
	}
	// The key the automator does not know is named by its file, with
	// what to check.
	oneLine(t, execResult{stderr: errb.String()}, "Unauthenticated: invalid API key; that is the key in "+wrongKey+" (--api-key-file): the automator knows no such key")
	if n := a.CountWork(t); n != 3 {
		t.Errorf("%d units of work after 3 accepted execs, want 3 (one each)", n)
	}
}

// TestExecShowsWhatAScriptKilledAtItsProxysStopWrote: a script killed when
// its proxy stopped (the grace period over) ran in part: exec exits 125
// with the failure, after what the script wrote until then, which tells
// how far it got (a review: it was dropped).
func TestExecShowsWhatAScriptKilledAtItsProxysStopWrote(t *testing.T) {
	t.Parallel()
	r := execKilledAtStop(t, `echo step1 done; printf 'step1 warned' >&2`, 0)
	if r.code != cli.ExitFailed || r.stdout != "step1 done\n" || !strings.HasPrefix(r.stderr, "step1 warned\nautomator: work ") || !strings.Contains(r.stderr, "grace period over") {
		t.Errorf("exec of a script killed at its proxy's stop: %+v; want exit 125, the script's stdout, then its stderr and the failure on a line of its own", r)
	}
}

// TestExecSaysAKilledScriptsOutputWasCut: what a script killed at its
// proxy's stop wrote, cut at the output limit, is said cut, as a finished
// script's is (a re-review: the failure's output came without the line).
func TestExecSaysAKilledScriptsOutputWasCut(t *testing.T) {
	t.Parallel()
	r := execKilledAtStop(t, `printf 0123456789abcdef`, 10)
	if r.code != cli.ExitFailed || r.stdout != "0123456789" || !strings.Contains(r.stderr, "its stdout was cut at the proxy's output limit (its max_output_bytes): the first 10 bytes are kept") || !strings.Contains(r.stderr, "grace period over") {
		t.Errorf("exec of a script killed at its proxy's stop, its output cut: %+v; want exit 125, the first 10 bytes, the line saying they were cut and the failure", r)
	}
}

// execKilledAtStop runs exec of a script that runs first, then waits,
// on a proxy (output limit maxOutput, its default when 0) stopped once
// the script waits, with a grace period of 50 ms, and returns what exec
// did.
func execKilledAtStop(t *testing.T, first string, maxOutput int) execResult {
	t.Helper()
	a := automatortest.Start(t, automatortest.Options{})
	scripts := t.TempDir()
	automatortest.WriteScript(t, scripts, "s.sh", first+`; touch "$1"; exec sleep 60`)
	p := a.StartProxy(t, automatortest.ProxyOptions{InstanceID: "a", ScriptsDir: scripts, MaxOutput: maxOutput, GracePeriod: 50 * time.Millisecond})
	p.WaitPolling(t)
	marker := filepath.Join(t.TempDir(), "started")
	done := make(chan execResult, 1)
	go func() { done <- execCLI(context.Background(), a, "", "--account", "acme", "s.sh", marker) }()
	automatortest.WaitFor(t, 10*time.Second, "the script to start", func() bool { _, err := os.Stat(marker); return err == nil })
	p.Stop()
	return waittest.Recv(t, done, "exec to end once the proxy stopped")
}

// TestExecInterruptedCancelsItsUnit: Ctrl-C (the context ending) cancels
// the running unit; the proxy kills the script's whole process tree, and
// exec exits 126.
func TestExecInterruptedCancelsItsUnit(t *testing.T) {
	t.Parallel()
	a := startWithScripts(t)
	pidFile := filepath.Join(t.TempDir(), "pids")
	ctx, interrupt := context.WithCancel(context.Background())
	done := make(chan execResult, 1)
	go func() { done <- execCLI(ctx, a, "", "--account", "acme", "--timeout", "60s", "sleeper.sh", pidFile) }()

	automatortest.WaitFor(t, 10*time.Second, "the script to start", func() bool { _, err := os.Stat(pidFile); return err == nil })
	pids := pidtest.ScriptPIDs(t, pidFile)
	interrupt()
	r := waittest.Recv(t, done, "exec to return once interrupted")
	if r.code != cli.ExitCancelled || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "cancelled (interrupted)") {
		t.Fatalf("exec: %+v; want exit 126 with one line saying it was cancelled", r)
	}
	automatortest.WaitFor(t, 10*time.Second, "the script and its child to be killed", func() bool {
		return pidtest.Gone(pids[0]) && pidtest.Gone(pids[1])
	})
	id := regexp.MustCompile(`w_[0-9a-f]+`).FindString(r.stderr)
	w, err := a.Store.WorkGet(context.Background(), id)
	if err != nil || w.State != store.StateCancelled {
		t.Fatalf("unit %q after the interrupt: %v, %v; want cancelled", id, w.State, err)
	}
}

// TestExecFailsOverToTheNextServer: --server takes several URLs.
func TestExecFailsOverToTheNextServer(t *testing.T) {
	t.Parallel()
	a := startWithScripts(t)
	down := "https://" + closedport.Addr(t)
	r := execCLI(context.Background(), a, down+","+a.URL(), "--account", "acme", "--stdin", "-", "exit.sh", "0")
	if r.code != 0 || r.stdout != "from stdin\n" {
		t.Fatalf("exec with the first server down: %+v", r)
	}
}

// TestExecRefusesPlaintextToAnotherHost: --server http:// to a host that is
// not loopback is refused before anything is sent: an automator serves
// plaintext on loopback only, and the API key would cross the network in
// clear to something else.
func TestExecRefusesPlaintextToAnotherHost(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	code := cli.Main(t.Context(), []string{"exec", "--server", "http://automator.example:8443", "--api-key-file", "no-such-file",
		"--account", "acme", "x.sh"}, cli.Env{Stdout: &out, Stderr: &errb})
	want := `--server "http://automator.example:8443": http:// is for an automator serving plaintext on loopback only; give https://automator.example:8443`
	if code != cli.ExitError || !strings.Contains(errb.String(), want) {
		t.Errorf("exit %d, stderr %q; want %d and %q", code, errb.String(), cli.ExitError, want)
	}
}

// TestExecNamesACAFileThatHoldsNoCertificate: a --ca file that is not a
// PEM certificate (a profile, say) is one line naming that file, before
// anything is dialled.
func TestExecNamesACAFileThatHoldsNoCertificate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key, ca := filepath.Join(dir, "api.key"), filepath.Join(dir, "proxy.yaml")
	if err := os.WriteFile(key, []byte("oak_x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca, []byte("automator_url: https://127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := cli.Main(t.Context(), []string{"exec", "--server", "https://127.0.0.1:1", "--api-key-file", key, "--ca", ca,
		"--account", "acme", "x.sh"}, cli.Env{Stdout: &out, Stderr: &errb})
	want := "CA certificate " + ca + " holds no PEM certificate"
	if code != cli.ExitError || !strings.Contains(errb.String(), want) || strings.Count(errb.String(), "\n") != 1 {
		t.Errorf("exit %d, stderr %q; want %d and one line %q", code, errb.String(), cli.ExitError, want)
	}
}

// TestExecRefusesATimeoutThatIsNotPositive: --timeout 0s or below is one
// line and exit 255 before anything is queued, not a unit silently given
// the server's default deadline.
// TestExecSaysItsFlagsGoBeforeTheScript: an --account after SCRIPT is the
// script's argument; the missing --account says so (a review: it said only
// "--account is required").
func TestExecSaysItsFlagsGoBeforeTheScript(t *testing.T) {
	t.Parallel()
	for _, flag := range []string{"--account", "-account", "--account=acme", "-account=acme"} { // the flag package takes either
		var out, errb bytes.Buffer
		code := cli.Main(t.Context(), []string{"exec", "--data-dir", t.TempDir(), "argv.py", flag, "acme"}, cli.Env{Stdout: &out, Stderr: &errb})
		want := "--account is required: the --account after argv.py is one of the script's arguments, as is everything after SCRIPT; give exec's flags before it"
		if code != cli.ExitError || !strings.Contains(errb.String(), want) {
			t.Errorf("exec with %s after the script: exit %d, stderr %q; want %d saying %q", flag, code, errb.String(), cli.ExitError, want)
		}
	}
}

func TestExecRefusesATimeoutThatIsNotPositive(t *testing.T) {
	t.Parallel()
	for _, d := range []string{"0s", "0", "-1s"} {
		var out, errb bytes.Buffer
		code := cli.Main(t.Context(), []string{"exec", "--data-dir", t.TempDir(), "--account", "acme", "--timeout", d, "x.sh"},
			cli.Env{Stdout: &out, Stderr: &errb})
		if code != cli.ExitError || !strings.Contains(errb.String(), "must be positive") || strings.Count(errb.String(), "\n") != 1 {
			t.Errorf("--timeout %s: exit %d, stderr %q; want %d and one line saying it must be positive", d, code, errb.String(), cli.ExitError)
		}
	}
}
