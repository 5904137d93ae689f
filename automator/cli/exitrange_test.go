package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/client"
)

// TestExecExitsWithARemoteCodeOnlyInside0To255: a remote exit code that a
// process cannot exit with (a windows script's 256 or -1073741819) makes
// exec exit 255 with a one-line reason, rather than one the shell would
// read as another (256 as 0: success); 0 and 255 are passed on.
func TestExecExitsWithARemoteCodeOnlyInside0To255(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		remote, want int
		reason       bool
	}{
		{0, 0, false}, {255, 255, false},
		{256, ExitError, true}, {-1, ExitError, true}, {-1073741819, ExitError, true},
	} {
		var out, errb bytes.Buffer
		code, err := report(t.Context(), client.Result{WorkID: "w-1", ExitCode: tc.remote}, nil, Env{Stdout: &out, Stderr: &errb})
		if err != nil || code != tc.want {
			t.Errorf("remote exit %d: exec exits %d (%v), want %d", tc.remote, code, err, tc.want)
		}
		if got := strings.Count(errb.String(), "\n") == 1 && strings.Contains(errb.String(), "outside 0-255"); got != tc.reason {
			t.Errorf("remote exit %d: stderr %q; want a line saying it is outside 0-255: %v", tc.remote, errb.String(), tc.reason)
		}
	}
}
