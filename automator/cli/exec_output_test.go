//go:build linux

package cli_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

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
