//go:build linux

package cli

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/internal/grpcwire"
)

// TestExecSendsStdinUpToTheAutomatorsConfiguredLimit: with limits.max_stdin
// raised in automator.yaml, `automator exec --stdin` sends what the
// automator accepts (here 1.5 MiB, over the 1 MiB default) through a real
// `serve` to a real `proxy run`; past the configured limit the automator
// refuses it in one line naming limits.max_stdin, and past the most any
// automator accepts exec refuses it itself. Neither refusal queues a unit.
func TestExecSendsStdinUpToTheAutomatorsConfiguredLimit(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	f, err := os.OpenFile(filepath.Join(dir, config.FileConfig), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("limits:\n  max_stdin: 2097152\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s := serveDirInProcess(t, dir)
	if err := os.WriteFile(filepath.Join(s.scripts, "sum.sh"), []byte("#!/bin/sh\nsha256sum | cut -d' ' -f1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s.proxy(t, s.account(t, "acme"), "a")

	cli := func(stdin []byte, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := Main(t.Context(), args, Env{Stdin: bytes.NewReader(stdin), Stdout: &out, Stderr: &errb})
		return code, out.String(), errb.String()
	}
	exec := func(n int) ([]byte, int, string, string) {
		stdin := make([]byte, n)
		rand.Read(stdin)
		code, out, errOut := cli(stdin, "exec", "--data-dir", dir, "--account", "acme", "--stdin", "-", "sum.sh")
		return stdin, code, out, errOut
	}

	stdin, code, out, errOut := exec(1536 << 10)
	if sum := sha256.Sum256(stdin); code != 0 || strings.TrimSpace(out) != hex.EncodeToString(sum[:]) {
		t.Errorf("exec with 1.5 MiB of stdin, under limits.max_stdin 2 MiB: exit %d, stdout %q, stderr %q; want exit 0 and the stdin's SHA-256 %x",
			code, out, errOut, sum)
	}
	if _, code, _, errOut := exec(2560 << 10); code != ExitError || !strings.Contains(errOut, "limits.max_stdin") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("exec with 2.5 MiB of stdin, over limits.max_stdin 2 MiB: exit %d, stderr %q; want exit %d and one line naming limits.max_stdin", code, errOut, ExitError)
	}
	if _, code, _, errOut := exec(config.MaxStdinLimit + 1); code != ExitError || !strings.Contains(errOut, "--stdin") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("exec with more stdin than any automator accepts: exit %d, stderr %q; want exit %d and one line naming --stdin", code, errOut, ExitError)
	}
	if code, out, errOut := cli(nil, "work", "list", "--data-dir", dir, "--json"); code != 0 || strings.Count(out, `"work_id"`) != 1 {
		t.Errorf("work list after one accepted and two refused: exit %d: %s%s; want one unit", code, out, errOut)
	}
}

// endless is a stdin that never ends: it fails the read once it has given
// twice the most any automator accepts.
type endless struct{ n int }

func (e *endless) Read(p []byte) (int, error) {
	if e.n >= 2*config.MaxStdinLimit {
		return 0, errors.New("read on far past the limit")
	}
	n := min(len(p), 2*config.MaxStdinLimit-e.n)
	clear(p[:n])
	e.n += n
	return n, nil
}

// TestExecStopsReadingAnEndlessStdinAtTheLimit: `exec --stdin -` fed from
// a source that never ends (a device, a runaway pipe) refuses it once it
// has read past the most any automator accepts, without reading on.
func TestExecStopsReadingAnEndlessStdinAtTheLimit(t *testing.T) {
	t.Parallel()
	r := &endless{}
	_, err := readStdin(t.Context(), "-", r)
	if err == nil || !strings.Contains(err.Error(), "more than") || !strings.Contains(err.Error(), "limits.max_stdin") {
		t.Fatalf("readStdin of an endless stdin: %v; want the refusal naming limits.max_stdin", err)
	}
	if r.n > config.MaxStdinLimit+1<<20 {
		t.Errorf("read %d bytes of an endless stdin, want to stop just past the limit of %d", r.n, config.MaxStdinLimit)
	}
}

// TestWhenToRetrySaysWhenOnce: a refusal that waiting mends says when to
// try again, once: not again when its message says it already; other
// errors are left as they are.
func TestWhenToRetrySaysWhenOnce(t *testing.T) {
	t.Parallel()
	withDelay := func(msg string, d time.Duration, reason string) error {
		st, err := status.New(codes.ResourceExhausted, msg).WithDetails(
			&errdetails.RetryInfo{RetryDelay: durationpb.New(d)},
			&errdetails.ErrorInfo{Reason: reason, Domain: grpcwire.ErrorDomain})
		if err != nil {
			t.Fatal(err)
		}
		return st.Err()
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errors.New("plain"), "plain"},
		{status.Error(codes.ResourceExhausted, "disk full"), "rpc error: code = ResourceExhausted desc = disk full"},
		// A full queue is told apart in the client's errors
		// (client.ErrQueueFull: TestExecRefusedForAFullQueueSaysWhenToTryAgain).
		{withDelay("too many failed authentications; retry in 45s", 45*time.Second, grpcwire.ReasonTooManyFailedAuthentications), "rpc error: code = ResourceExhausted desc = too many failed authentications; retry in 45s"},
		{withDelay("slow down", 2*time.Second, "SOMETHING_ELSE"), "rpc error: code = ResourceExhausted desc = slow down; try again in 2s"},
	} {
		got := whenToRetry(tc.err)
		if (got == nil) != (tc.want == "") || (got != nil && got.Error() != tc.want) {
			t.Errorf("whenToRetry(%v) = %v; want %q", tc.err, got, tc.want)
		}
	}
}
