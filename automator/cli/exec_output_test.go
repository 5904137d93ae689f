//go:build linux

package cli_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/cli"
)

// failingWriter fails every write, as a file on a full disk does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// TestExecReportsOutputItCouldNotWrite: exec whose own stdout cannot be
// written (a redirect to a full disk) has lost the remote output; exiting
// with the remote exit code 0 would report a success whose output is gone.
// It is exec's own error: 255 with a one-line reason.
func TestExecReportsOutputItCouldNotWrite(t *testing.T) {
	t.Parallel()
	a := startWithScripts(t)
	var errb bytes.Buffer
	code := cli.Main(context.Background(),
		[]string{"exec", "--server", a.URL(), "--api-key-file", a.APIKeyFile, "--ca", a.CAFile, "--account", "acme", "--stdin", "-", "exit.sh", "0"},
		cli.Env{Stdin: strings.NewReader("the output\n"), Stdout: failingWriter{}, Stderr: &errb})
	if code != cli.ExitError || strings.Count(errb.String(), "\n") != 2 {
		// Two lines: the remote stderr ("exiting 0"), then exec's reason.
		t.Fatalf("exec whose stdout fails: exit %d, stderr %q; want %d and a line saying the output was not written", code, errb.String(), cli.ExitError)
	}
}

// TestExecWritesNothingOfAnEmptyStream: a script that printed nothing on
// stdout leaves exec's stdout alone, so a stdout that cannot be written
// (a full disk: /dev/full) fails nothing (a review: exec wrote the empty
// output, which failed, and exited 255 though nothing was lost).
func TestExecWritesNothingOfAnEmptyStream(t *testing.T) {
	t.Parallel()
	a := startWithScripts(t)
	var errb bytes.Buffer
	code := cli.Main(context.Background(),
		[]string{"exec", "--server", a.URL(), "--api-key-file", a.APIKeyFile, "--ca", a.CAFile, "--account", "acme", "exit.sh", "3"},
		cli.Env{Stdin: strings.NewReader(""), Stdout: failingWriter{}, Stderr: &errb})
	if code != 3 || errb.String() != "exiting 3\n" {
		t.Fatalf("exec of a script that prints nothing on stdout, its stdout failing: exit %d, stderr %q; want the script's 3 and its stderr", code, errb.String())
	}
}

// TestExecSaysWhichStreamWasCutOnALineOfItsOwn: a remote output past the
// proxy's output limit is written as far as it was kept, and exec says
// which stream was cut on a line of its own after the remote stderr, also
// when that stderr does not end a line (it was glued to the remote's last
// line, and did not say which stream).
func TestExecSaysWhichStreamWasCutOnALineOfItsOwn(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	scripts := t.TempDir()
	automatortest.WriteScript(t, scripts, "loud.sh", `printf 0123456789abcdef; printf oops >&2`)
	a.StartProxy(t, automatortest.ProxyOptions{InstanceID: "a", ScriptsDir: scripts, MaxOutput: 10}).WaitPolling(t)
	var out, errb bytes.Buffer
	code := cli.Main(context.Background(),
		[]string{"exec", "--server", a.URL(), "--api-key-file", a.APIKeyFile, "--ca", a.CAFile, "--account", "acme", "loud.sh"},
		cli.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb})
	if code != 0 || out.String() != "0123456789" {
		t.Fatalf("exec: exit %d, stdout %q; want 0 and the first 10 bytes", code, out.String())
	}
	lines := strings.Split(errb.String(), "\n")
	if len(lines) != 3 || lines[0] != "oops" || lines[2] != "" ||
		!strings.HasPrefix(lines[1], "automator: work ") || !strings.HasSuffix(lines[1], ": its stdout was cut at the proxy's output limit (its max_output_bytes): the first 10 bytes are kept, the rest was dropped") {
		t.Errorf("stderr %q; want the remote's \"oops\", then a line of exec's own saying its stdout was cut", errb.String())
	}
}

// TestExecTakesAServerURLsSchemeInAnyCase: URL schemes are not case
// sensitive, so --server HTTPS://HOST:PORT is the automator at
// https://HOST:PORT (it was refused as not https://HOST:PORT).
func TestExecTakesAServerURLsSchemeInAnyCase(t *testing.T) {
	t.Parallel()
	a := startWithScripts(t)
	var out, errb bytes.Buffer
	server := "HTTPS" + strings.TrimPrefix(a.URL(), "https")
	code := cli.Main(context.Background(),
		[]string{"exec", "--server", server, "--api-key-file", a.APIKeyFile, "--ca", a.CAFile, "--account", "acme", "--stdin", "-", "exit.sh", "0"},
		cli.Env{Stdin: strings.NewReader("hi\n"), Stdout: &out, Stderr: &errb})
	if code != 0 || out.String() != "hi\n" {
		t.Errorf("exec --server %s: exit %d, stdout %q, stderr %q; want 0 and the remote output", server, code, out.String(), errb.String())
	}
}
