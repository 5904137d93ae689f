//go:build !windows

package agent

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestAFailureNamingAPathThatIsNotUTF8IsReported: a unit the proxy cannot
// run is reported failed even when the reason quotes a path whose bytes are
// not UTF-8 (a scripts directory named in Latin-1, given as --scripts-dir):
// the reason is a protobuf string, which must be UTF-8, and such a result
// did not seal, so nothing was posted and the unit timed out at its
// deadline instead of failing at once.
func TestAFailureNamingAPathThatIsNotUTF8IsReported(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "scripts-\xe9")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("this file system takes no name that is not UTF-8: %v", err)
	}
	// No #! line: the start fails, and Go's error names the script's path.
	if err := os.WriteFile(filepath.Join(dir, "noshebang.sh"), []byte("echo hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := newFake()
	a := New(Options{
		tune:   testTuning(t),
		Client: f, Keys: crypto.Keys{testKey}, InstanceID: "a", ScriptsDir: dir,
		MaxConcurrency: 1, PollWait: time.Second, GracePeriod: 5 * time.Second,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&lockedWriter{b: new(bytes.Buffer)}, nil)),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); waittest.Recv(t, done, "the agent's Run to return") })

	f.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{claim(t, "w1", &automatorv1.Command{Script: "noshebang.sh"})}}
	got := waittest.Recv(t, f.completed, "the unit whose script could not start to be reported failed")
	if got.GetOutcome() != automatorv1.Outcome_OUTCOME_FAILED {
		t.Fatalf("outcome %v, want FAILED", got.GetOutcome())
	}
	r := openedResult(t, "w1", got)
	if !utf8.ValidString(r.GetFailure()) || !strings.Contains(r.GetFailure(), "noshebang.sh") || !strings.Contains(r.GetFailure(), "no #! line") {
		t.Fatalf("failure %q, want valid UTF-8 naming the script and why it did not start", r.GetFailure())
	}
}
