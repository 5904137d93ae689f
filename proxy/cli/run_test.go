package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/waittest"
	"github.com/opsgate/opsgate/proxy/agent"
)

// TestRunRefusesAnInstanceIDTheAutomatorRefuses: an instance_id (in the
// file or as --instance-id) that the automator refuses in every poll, one
// with a control character or that is not UTF-8, stops `proxy run` at once
// with the reason, instead of a proxy that starts and retries for ever.
// Any other printable id is accepted. The run's context is cancelled from
// the start: a config that passes runs the agent only to stop it.
func TestRunRefusesAnInstanceIDTheAutomatorRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	scripts := filepath.Join(dir, "scripts")
	if err := os.Mkdir(scripts, 0o755); err != nil {
		t.Fatal(err)
	}
	key, err := crypto.NewKey(1)
	if err != nil {
		t.Fatal(err)
	}
	profile := "automator_url: http://127.0.0.1:1\ntoken: opt_x\nkey: " + key.String() + "\nscripts_dir: '" + scripts + "'\n"
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	run := func(t *testing.T, body string, args ...string) (int, string) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "proxy.yaml")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		code := Main(ctx, append([]string{"run", "--config", path}, args...), Env{Stdout: &stdout, Stderr: &stderr})
		return code, stderr.String()
	}
	for _, id := range []string{"host\ta", "host-a\n", "host\x7f", "host-\xff"} {
		if code, stderr := run(t, profile, "--instance-id", id); code != 1 || !strings.Contains(stderr, "instance_id:") {
			t.Errorf("proxy run --instance-id %q: exit %d, stderr %q; want exit 1 naming instance_id", id, code, stderr)
		}
	}
	// In the file, as YAML escapes.
	for _, line := range []string{`instance_id: "host\ta"`, `instance_id: "host-a\n"`, `instance_id: "host\x7f"`} {
		if code, stderr := run(t, profile+line+"\n"); code != 1 || !strings.Contains(stderr, "instance_id:") {
			t.Errorf("proxy run with %s in the file: exit %d, stderr %q; want exit 1 naming instance_id", line, code, stderr)
		}
	}
	for _, id := range []string{"host-a", "rack 3 / hôte-ü", strings.Repeat("i", 128)} {
		if code, stderr := run(t, profile, "--instance-id", id); code != 0 {
			t.Errorf("proxy run --instance-id %q: exit %d, stderr %q; want it accepted", id, code, stderr)
		}
	}
	if code, stderr := run(t, profile, "--instance-id", strings.Repeat("i", 129)); code != 1 || !strings.Contains(stderr, "instance_id:") {
		t.Errorf("proxy run with a 129-byte instance id: exit %d, stderr %q; want exit 1 naming instance_id", code, stderr)
	}
}

// TestABadFlagIsOneLineAndNoHelp: a bad flag of run or of a service
// command is one line on stderr, once, with no help on stdout.
func TestABadFlagIsOneLineAndNoHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"run", "--bogus"}, {"status", "--bogus"}, {"install", "--manual-start=maybe"}} {
		var stdout, stderr bytes.Buffer
		code := Main(t.Context(), args, Env{Stdout: &stdout, Stderr: &stderr})
		if code != 1 || stdout.Len() != 0 || strings.Count(stderr.String(), "\n") != 1 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 1, nothing, one line", args, code, stdout.String(), stderr.String())
		}
	}
}

// TestHelpNamingACommandIsThatCommandsHelp: `proxy help run` prints what
// `proxy run --help` does, not the whole list; `help` of a command that
// does not exist says so.
func TestHelpNamingACommandIsThatCommandsHelp(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := Main(t.Context(), []string{"help", "run"}, Env{Stdout: &stdout, Stderr: &stderr}); code != 0 || stderr.Len() != 0 ||
		!strings.Contains(stdout.String(), "proxy run     --config FILE") || strings.Contains(stdout.String(), "proxy install") {
		t.Errorf("help run: exit %d, stdout %q, stderr %q; want 0 and run's help only", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	stderr.Reset()
	if code := Main(t.Context(), []string{"help", "nosuch"}, Env{Stdout: &stdout, Stderr: &stderr}); code != 1 || stdout.Len() != 0 || !strings.Contains(stderr.String(), `unknown command "nosuch"`) {
		t.Errorf("help nosuch: exit %d, stdout %q, stderr %q; want 1 and the unknown command named", code, stdout.String(), stderr.String())
	}
}

// TestABadFlagValueIsNotBlamedOnTheFile: a value given by a flag that
// fails validation is reported as the file's or the flags', not the
// file's alone.
func TestABadFlagValueIsNotBlamedOnTheFile(t *testing.T) {
	t.Parallel()
	key, err := crypto.NewKey(1)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(path, []byte("automator_url: http://127.0.0.1:1\ntoken: opt_x\nkey: "+key.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := Main(t.Context(), []string{"run", "--config", path, "--scripts-dir", t.TempDir(), "--log-format", "xml"}, Env{Stdout: &stdout, Stderr: &stderr})
	if want := "invalid proxy config " + path + " or flags: log_format:"; code != 1 || !strings.Contains(stderr.String(), want) {
		t.Errorf("exit %d, stderr %q; want 1 and %q", code, stderr.String(), want)
	}
}

// TestAConfigOfSeveralProblemsIsOneLine: a config with several problems
// names them all on one line of stderr (exit 1), as every error of the
// command line is one line.
func TestAConfigOfSeveralProblemsIsOneLine(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(path, []byte("automator_url: https://x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := Main(t.Context(), []string{"run", "--config", path}, Env{Stdout: &stdout, Stderr: &stderr})
	if code != 1 || stdout.Len() != 0 || strings.Count(stderr.String(), "\n") != 1 {
		t.Errorf("proxy run with a broken config: exit %d, stdout %q, stderr %q; want 1, nothing, one line", code, stdout.String(), stderr.String())
	}
	for _, key := range []string{"automator_url:", "token:", "key:", "ca_cert:", "scripts_dir:"} {
		if !strings.Contains(stderr.String(), key) {
			t.Errorf("stderr %q does not name %s", stderr.String(), key)
		}
	}
}

// TestReconnectAfterTheAutomatorReturnsWithinSeconds: the proxy dials a
// lost automator again at most a few seconds apart, so that after a
// restart or an upgrade of the automator its instances poll again within
// seconds, not after gRPC's default backoff of up to two minutes.
func TestReconnectAfterTheAutomatorReturnsWithinSeconds(t *testing.T) {
	t.Parallel()
	b := Reconnect.Backoff
	if b.MaxDelay <= 0 || b.MaxDelay > 5*time.Second || b.BaseDelay <= 0 || b.BaseDelay > b.MaxDelay {
		t.Errorf("reconnect backoff %+v: want a delay of at most 5 s between dials", b)
	}
}

// TestStrayArgumentsAreNamedWithoutTheFlags: run and the service commands
// take no arguments; one given before their flags is named alone, not with
// the flags after it as if they were arguments too, and nothing is done.
func TestStrayArgumentsAreNamedWithoutTheFlags(t *testing.T) {
	t.Parallel()
	config := filepath.Join(t.TempDir(), "never-read.yaml")
	for _, args := range [][]string{
		{"run", "extra", "--config", config, "--instance-id", "a"},
		{"install", "extra", "--config", config},
		{"start", "extra", "--name", "opsgate-proxy"},
		{"stop", "extra", "--name", "opsgate-proxy"},
		{"status", "extra", "--name", "opsgate-proxy"},
		{"uninstall", "extra", "--name", "opsgate-proxy"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(t.Context(), args, Env{Stdout: &stdout, Stderr: &stderr})
		want := "proxy: " + args[0] + ` takes no arguments, got ["extra"]` + "\n"
		if args[0] == "install" {
			// Without --name: the argument may be the name meant.
			want = "proxy: install takes no arguments, got [\"extra\"]: to name it, give --name extra\n"
		}
		if code != 1 || stdout.Len() != 0 || stderr.String() != want {
			t.Errorf("proxy %s: exit %d, stdout %q, stderr %q; want 1 and %q", strings.Join(args, " "), code, stdout.String(), stderr.String(), want)
		}
	}
}

// TestTwoInstancesShareOneConfigThatSetsAStateDir: flags override the
// local settings so that two instances can share one file (DESIGN.md),
// and one state_dir serves one running proxy. So a file that sets
// state_dir is shared by giving the second instance --state-dir: it runs
// beside the first, which holds the file's state_dir meanwhile; without
// the flag it is refused, naming the directory held.
func TestTwoInstancesShareOneConfigThatSetsAStateDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	scripts, stateA, stateB := filepath.Join(dir, "scripts"), filepath.Join(dir, "state-a"), filepath.Join(dir, "state-b")
	if err := os.Mkdir(scripts, 0o755); err != nil {
		t.Fatal(err)
	}
	key, err := crypto.NewKey(1)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "proxy.yaml")
	body := "automator_url: http://127.0.0.1:1\ntoken: opt_x\nkey: " + key.String() + "\nscripts_dir: '" + scripts + "'\nstate_dir: '" + stateA + "'\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}

	// Instance a runs on the file's state_dir until the test ends.
	ctxA, stopA := context.WithCancel(t.Context())
	exitedA := make(chan int, 1)
	go func() {
		exitedA <- Main(ctxA, []string{"run", "--config", path, "--instance-id", "a"}, Env{Stdout: io.Discard, Stderr: io.Discard})
	}()
	t.Cleanup(func() {
		stopA()
		waittest.Recv(t, exitedA, "instance a to stop")
	})
	waittest.Until(t, "instance a to hold the file's state_dir", func() bool {
		return errors.Is(agent.CheckStateDir(stateA), agent.ErrStateDirHeld)
	})

	// Instance b: the same file, run until its (cancelled) context stops it.
	stopped, cancel := context.WithCancel(t.Context())
	cancel()
	var stderr bytes.Buffer
	if code := Main(stopped, []string{"run", "--config", path, "--instance-id", "b"}, Env{Stdout: io.Discard, Stderr: &stderr}); code != 1 || !strings.Contains(stderr.String(), stateA) {
		t.Errorf("a second instance on the file's state_dir: exit %d, stderr %q; want 1 naming %s", code, stderr.String(), stateA)
	}
	stderr.Reset()
	if code := Main(stopped, []string{"run", "--config", path, "--instance-id", "b", "--state-dir", stateB}, Env{Stdout: io.Discard, Stderr: &stderr}); code != 0 {
		t.Errorf("a second instance with --state-dir %s: exit %d, stderr %q; want it to run beside the first", stateB, code, stderr.String())
	}
	if _, err := os.Stat(filepath.Join(stateB, agent.LockFileName)); err != nil {
		t.Errorf("instance b did not take the state_dir --state-dir gave: %v", err)
	}
	select {
	case code := <-exitedA:
		t.Errorf("instance a exited (%d) while b ran; want it to go on", code)
	default:
	}
}
