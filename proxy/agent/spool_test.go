package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/opsgate/opsgate/crypto"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/runner"
)

// spoolAutomator is a Client whose Complete answers with complete(req);
// its polls hand out the claims of claims, one poll each, then wait.
type spoolAutomator struct {
	claims   chan *automatorv1.Claim
	complete func(*automatorv1.CompleteRequest) error

	mu    sync.Mutex
	calls []*automatorv1.CompleteRequest
	ok    chan *automatorv1.CompleteRequest // accepted requests
}

func newSpoolAutomator(complete func(*automatorv1.CompleteRequest) error) *spoolAutomator {
	return &spoolAutomator{claims: make(chan *automatorv1.Claim, 4), complete: complete, ok: make(chan *automatorv1.CompleteRequest, 4)}
}

func (f *spoolAutomator) Poll(ctx context.Context, _ *automatorv1.PollRequest, _ ...grpc.CallOption) (*automatorv1.PollResponse, error) {
	select {
	case c := <-f.claims:
		return &automatorv1.PollResponse{Claims: []*automatorv1.Claim{c}}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

func (f *spoolAutomator) Complete(_ context.Context, in *automatorv1.CompleteRequest, _ ...grpc.CallOption) (*automatorv1.CompleteResponse, error) {
	f.mu.Lock()
	f.calls = append(f.calls, proto.Clone(in).(*automatorv1.CompleteRequest))
	f.mu.Unlock()
	if err := f.complete(in); err != nil {
		return nil, err
	}
	f.ok <- in
	return &automatorv1.CompleteResponse{}, nil
}

func (f *spoolAutomator) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// runSpoolAgent runs an agent of instance "a" that spools into dir; stop
// cancels it and waits for Run to return.
func runSpoolAgent(t *testing.T, f *spoolAutomator, dir string) (stop func()) {
	t.Helper()
	a := New(Options{
		Client: f, Keys: crypto.Keys{testKey}, InstanceID: "a", ScriptsDir: t.TempDir(),
		MaxConcurrency: 1, PollWait: time.Second, GracePeriod: 20 * time.Millisecond,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger:   slog.New(slog.DiscardHandler),
		SpoolDir: dir,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

func spoolFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func quickScript(t *testing.T) {
	useRunner(t, func(context.Context, runner.Spec) (runner.Result, error) {
		return runner.Result{ExitCode: 3, Stdout: []byte("kept")}, nil
	})
}

// TestResultIsSpooledBeforeItIsPosted: when the first Complete goes out, the
// result is already on disk; once accepted it is gone from the spool.
func TestResultIsSpooledBeforeItIsPosted(t *testing.T) {
	quickScript(t)
	dir := filepath.Join(t.TempDir(), "spool")
	var onDisk []string
	var dirMode, fileMode os.FileMode
	f := newSpoolAutomator(func(*automatorv1.CompleteRequest) error {
		if onDisk == nil {
			onDisk = spoolFiles(t, dir)
			if fi, err := os.Stat(dir); err == nil {
				dirMode = fi.Mode().Perm()
			}
			if fi, err := os.Stat(filepath.Join(dir, "w1.json")); err == nil {
				fileMode = fi.Mode().Perm()
			}
		}
		return nil
	})
	runSpoolAgent(t, f, dir)
	f.claims <- claim(t, "w1", &automatorv1.Command{Script: "s"})
	<-f.ok
	if len(onDisk) != 1 || onDisk[0] != "w1.json" {
		t.Fatalf("the spool held %q when the result was first posted, want [w1.json]", onDisk)
	}
	if dirMode != 0o700 || fileMode != 0o600 {
		t.Fatalf("spool directory mode %v, file mode %v; want 0700 and 0600", dirMode, fileMode)
	}
	// Emptied, the directory goes too: the state directory is left as
	// `proxy install` made it.
	waitFor(t, "the spool directory to go", func() bool { _, err := os.Stat(dir); return os.IsNotExist(err) })
}

// TestSpooledResultIsPostedAfterRestart: a proxy that stops while the
// automator is unreachable keeps the result; the next run of the same
// instance posts it, byte for byte, and empties the spool.
func TestSpooledResultIsPostedAfterRestart(t *testing.T) {
	quickScript(t)
	dir := filepath.Join(t.TempDir(), "spool")
	down := newSpoolAutomator(func(*automatorv1.CompleteRequest) error { return status.Error(codes.Unavailable, "down") })
	stop := runSpoolAgent(t, down, dir)
	down.claims <- claim(t, "w1", &automatorv1.Command{Script: "s"})
	waitFor(t, "a few failed posts", func() bool { return down.callCount() >= 3 })
	stop()
	if files := spoolFiles(t, dir); len(files) != 1 || files[0] != "w1.json" {
		t.Fatalf("after a stop with the result unposted the spool holds %q, want [w1.json]", files)
	}
	first := down.calls[0]

	up := newSpoolAutomator(func(*automatorv1.CompleteRequest) error { return nil })
	runSpoolAgent(t, up, dir)
	got := <-up.ok
	if !proto.Equal(got, first) {
		t.Fatalf("posted after the restart:\n%v\nwant the request of the first run:\n%v", got, first)
	}
	plain, err := crypto.Open(crypto.Keys{testKey}, "acme", "w1", crypto.DirResult, got.GetSealedResult())
	if err != nil {
		t.Fatal(err)
	}
	var r automatorv1.Result
	if err := proto.Unmarshal(plain, &r); err != nil || r.GetExitCode() != 3 || string(r.GetStdout()) != "kept" {
		t.Fatalf("result %v (%v), want exit 3 and stdout \"kept\"", &r, err)
	}
	waitFor(t, "the posted result to leave the spool", func() bool { return len(spoolFiles(t, dir)) == 0 })
}

// TestRefusedResultLeavesTheSpool: a result the automator refuses for good
// (the unit already ended) is not posted again on the next start.
func TestRefusedResultLeavesTheSpool(t *testing.T) {
	quickScript(t)
	dir := filepath.Join(t.TempDir(), "spool")
	f := newSpoolAutomator(func(*automatorv1.CompleteRequest) error {
		return status.Error(codes.FailedPrecondition, "work is timed_out; result refused")
	})
	runSpoolAgent(t, f, dir)
	f.claims <- claim(t, "w1", &automatorv1.Command{Script: "s"})
	waitFor(t, "the refusal", func() bool { return f.callCount() == 1 })
	waitFor(t, "the refused result to leave the spool", func() bool { return len(spoolFiles(t, dir)) == 0 })
}

// TestExpiredSpooledResultIsDroppedNotPosted: at start, results whose
// deadline has passed are deleted and never sent; those of another instance
// sharing the directory are left for it; unreadable records are set aside.
func TestExpiredSpooledResultIsDroppedNotPosted(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	s := newSpool(dir, slog.New(slog.DiscardHandler))
	now := time.Now()
	s.put("acme", now.Add(-time.Second), &automatorv1.CompleteRequest{WorkId: "w-old", ClaimId: "c", InstanceId: "a"})
	s.put("acme", now.Add(time.Minute), &automatorv1.CompleteRequest{WorkId: "w-other", ClaimId: "c", InstanceId: "b"})
	s.put("acme", now.Add(time.Minute), &automatorv1.CompleteRequest{WorkId: "w-due", ClaimId: "c", InstanceId: "a", Outcome: automatorv1.Outcome_OUTCOME_FAILED, Failure: "f"})
	if err := os.WriteFile(filepath.Join(dir, "w-bad.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".tmp-123"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}

	f := newSpoolAutomator(func(*automatorv1.CompleteRequest) error { return nil })
	runSpoolAgent(t, f, dir)
	got := <-f.ok
	if got.GetWorkId() != "w-due" || got.GetFailure() != "f" {
		t.Fatalf("posted %v, want the due result of w-due", got)
	}
	waitFor(t, "the spool to settle", func() bool { return len(spoolFiles(t, dir)) == 2 })
	if files := strings.Join(spoolFiles(t, dir), " "); files != "w-bad.json.bad w-other.json" {
		t.Fatalf("spool holds %q, want the other instance's record and the bad one set aside", files)
	}
	if n := f.callCount(); n != 1 {
		t.Fatalf("%d Complete calls, want 1 (the expired result is never sent)", n)
	}
}

// TestSpoolNamesOddWorkIDsSafely: a work id is never used as a path.
func TestSpoolNamesOddWorkIDsSafely(t *testing.T) {
	s := newSpool(t.TempDir(), slog.New(slog.DiscardHandler))
	for _, id := range []string{"../x", "a/b", ".hidden", "w_0123abc"} {
		p := s.path(id)
		if filepath.Dir(p) != s.dir || strings.HasPrefix(filepath.Base(p), ".") {
			t.Errorf("work id %q spools to %q, outside %q or hidden", id, p, s.dir)
		}
	}
	if got := filepath.Base(s.path("w_0123abc")); got != "w_0123abc.json" {
		t.Errorf("a plain work id spools to %q, want w_0123abc.json", got)
	}
}
