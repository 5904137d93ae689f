package cli_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/cli"
)

// TestExecPassesVariablesAndAnIdempotencyKey: --env NAME=VALUE (repeated)
// gives the script its variables, refused ones refused as the API refuses
// them; --idempotency-key makes a second exec with the key return the
// first one's unit and output without running the script again (a CI job
// that runs exec again after it gave up), and the same key with another
// command is refused, naming the first unit.
func TestExecPassesVariablesAndAnIdempotencyKey(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	scripts := t.TempDir()
	automatortest.WriteScript(t, scripts, "vars.sh", `echo run >> "$1"; echo "$GREETING, $WHO ($EMPTY)"`)
	a.StartProxy(t, automatortest.ProxyOptions{InstanceID: "a", ScriptsDir: scripts, AllowedEnv: []string{"GREETING", "WHO", "EMPTY"}}).WaitPolling(t)
	runs := filepath.Join(t.TempDir(), "runs")
	exec := func(args ...string) (int, string, string) {
		return mainCLI(append(append([]string{"exec"}, remoteFlags(a)...), append([]string{"--account", "acme", "--timeout", "30s"}, args...)...)...)
	}
	if code, out, stderr := exec("--env", "GREETING=hello", "--env", "WHO=a=b", "--env", "EMPTY=", "vars.sh", runs); code != 0 || out != "hello, a=b ()\n" {
		t.Errorf("exec --env: exit %d, stdout %q, stderr %q; want the variables given", code, out, stderr)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--env", "GREETING"}, `invalid value "GREETING" for flag --env: want NAME=VALUE`},
		{[]string{"--env", "=x"}, `invalid value "=x" for flag --env: want NAME=VALUE`},
		{[]string{"--env", "A=1", "--env", "A=2"}, `invalid value "A=2" for flag --env: A is given twice`},
		{[]string{"--env", "LD_PRELOAD=/tmp/x.so"}, "LD_PRELOAD"},
		{[]string{"--idempotency-key", ""}, "--idempotency-key is empty"},
	} {
		if code, _, stderr := exec(append(c.args, "vars.sh", runs)...); code != cli.ExitError || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("exec %q: exit %d, stderr %q; want %d and one line saying %q", c.args, code, stderr, cli.ExitError, c.want)
		}
	}

	first := func() string { b, _ := os.ReadFile(runs); return string(b) }()
	for range 2 {
		if code, out, stderr := exec("--idempotency-key", "deploy-42", "--env", "GREETING=hi", "--env", "WHO=key", "vars.sh", runs); code != 0 || out != "hi, key ()\n" {
			t.Errorf("exec --idempotency-key: exit %d, stdout %q, stderr %q; want the first run's output", code, out, stderr)
		}
	}
	if b, _ := os.ReadFile(runs); string(b) != first+"run\n" {
		t.Errorf("the script ran %d times for two execs with one idempotency key; want once", strings.Count(string(b), "run")-strings.Count(first, "run"))
	}
	if code, _, stderr := exec("--idempotency-key", "deploy-42", "--env", "GREETING=other", "vars.sh", runs); code != cli.ExitError || !strings.Contains(stderr, "w_") {
		t.Errorf("exec with the key of another command: exit %d, stderr %q; want it refused, naming the first unit", code, stderr)
	}
}

// startWithScript starts an automator and one proxy instance, a, of
// account acme whose scripts directory holds the script name.
func startWithScript(t *testing.T, name, body string) *automatortest.Automator {
	t.Helper()
	a := automatortest.Start(t, automatortest.Options{})
	scripts := t.TempDir()
	automatortest.WriteScript(t, scripts, name, body)
	a.StartProxy(t, automatortest.ProxyOptions{InstanceID: "a", ScriptsDir: scripts}).WaitPolling(t)
	return a
}

// remoteFlags are the flags that reach a from afar, as a caller away from
// its host gives them.
func remoteFlags(a *automatortest.Automator) []string {
	return []string{"--server", a.URL(), "--api-key-file", a.APIKeyFile, "--ca", a.CAFile}
}

// mainCLI runs the command args in this process, its stdin empty, and
// returns its exit code, stdout and stderr.
func mainCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := cli.Main(context.Background(), args, cli.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
	return code, out.String(), errb.String()
}
