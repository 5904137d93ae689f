package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/waittest"
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

func (f *spoolAutomator) Poll(ctx context.Context, in *automatorv1.PollRequest, _ ...grpc.CallOption) (*automatorv1.PollResponse, error) {
	claims := f.claims
	if in.GetMaxUnits() == 0 {
		if in.GetWait().AsDuration() == 0 {
			// Like the automator: a poll for nothing that does not wait (a
			// stopping agent's report of a poll it cancelled) is answered
			// at once.
			return &automatorv1.PollResponse{}, nil
		}
		claims = nil // like the automator: no claim for a poll that asks for none
	}
	select {
	case c := <-claims:
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

// callsMade returns the Complete calls made so far, in order.
func (f *spoolAutomator) callsMade() []*automatorv1.CompleteRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *spoolAutomator) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// runSpoolAgent runs an agent of instance "a" that spools into dir, with
// hook (if any) as the spool's test hook; stop cancels it and waits for Run
// to return.
func runSpoolAgent(t *testing.T, f *spoolAutomator, dir string, hook ...func(spoolStage, string) error) (stop func()) {
	t.Helper()
	a := New(Options{
		tune:   testTuning(t),
		Client: f, Keys: crypto.Keys{testKey}, InstanceID: "a", ScriptsDir: t.TempDir(),
		MaxConcurrency: 1, PollWait: time.Second, GracePeriod: 20 * time.Millisecond,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger:   slog.New(slog.DiscardHandler),
		SpoolDir: dir,
	})
	if len(hook) > 0 {
		a.spool.hook = hook[0]
	}
	return runInBackground(t, a)
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

// stageHook is a spool test hook that reports each stage of each write on
// a channel and, at the stages in block, waits for a release first (a slow
// disk) and then fails with err, if set (a failing one).
type stageHook struct {
	seen    chan spoolStage // the write's stages
	settled chan struct{}   // the poster settled the result
	block   map[spoolStage]chan struct{}
	failAt  spoolStage
	failErr error
}

func newStageHook() *stageHook {
	return &stageHook{seen: make(chan spoolStage, 16), settled: make(chan struct{}, 16), block: map[spoolStage]chan struct{}{}}
}

// hold makes writes wait at stage until the returned func is called.
func (h *stageHook) hold(stage spoolStage) (release func()) {
	ch := make(chan struct{})
	h.block[stage] = ch
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

func (h *stageHook) hook(stage spoolStage, _ string) error {
	if stage == stageSettled {
		h.settled <- struct{}{}
		return nil
	}
	h.seen <- stage
	if ch := h.block[stage]; ch != nil {
		<-ch
	}
	if stage == h.failAt {
		return h.failErr
	}
	return nil
}

// reached waits until a write reaches stage (the stages of one write come
// in order; every test here makes one write).
func (h *stageHook) reached(stage spoolStage) error {
	timeout := time.After(10 * time.Second)
	for {
		select {
		case got := <-h.seen:
			if got == stage {
				return nil
			}
			if got > stage {
				return fmt.Errorf("the spool write reached stage %d, waiting for %d", got, stage)
			}
		case <-timeout:
			return fmt.Errorf("timed out waiting for the spool write to reach stage %d", stage)
		}
	}
}

func (h *stageHook) waitStage(t *testing.T, stage spoolStage) {
	t.Helper()
	if err := h.reached(stage); err != nil {
		t.Fatal(err)
	}
}

// TestResultIsPostedWhileTheSpoolIsSlow: the first Complete does not wait
// for the spool's fsyncs; when the automator accepts while they run, the
// write still completes after the answer and then removes its file: no file
// is left behind, and the emptied spool directory goes too.
func TestResultIsPostedWhileTheSpoolIsSlow(t *testing.T) {
	t.Parallel()
	quickScript(t)
	dir := filepath.Join(t.TempDir(), "spool")
	h := newStageHook()
	release := h.hold(stageSync)
	t.Cleanup(release)
	var held []string
	// The automator answers once the write is committed and held before
	// its fsyncs, so the answer comes first, the write's end after it.
	f := newSpoolAutomator(func(*automatorv1.CompleteRequest) error {
		if err := h.reached(stageSync); err != nil {
			t.Error(err)
		}
		held = spoolFiles(t, dir)
		return nil
	})
	runSpoolAgent(t, f, dir, h.hook)
	f.claims <- claim(t, "w1", &automatorv1.Command{Script: "s"})
	if got := waittest.Recv(t, f.ok, "the result to be posted while its spool write is held"); got.GetWorkId() != "w1" {
		t.Fatalf("posted %q, want w1", got.GetWorkId())
	}
	if len(held) != 1 || !strings.HasPrefix(held[0], ".tmp-") {
		t.Fatalf("while the write was held the spool held %q, want one temporary file", held)
	}
	waittest.Recv(t, h.settled, "the poster to settle the accepted result") // only now may the write go on
	release()
	h.waitStage(t, stageDone)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("after the accepted result's write completed the spool still holds %q (stat: %v), want no directory", spoolFiles(t, dir), err)
	}
	if n := f.callCount(); n != 1 {
		t.Fatalf("%d Complete calls, want 1", n)
	}
}

// TestSpoolWriteIsSkippedWhenAcceptedFirst: a write that has not begun when
// the automator accepts the result writes nothing.
func TestSpoolWriteIsSkippedWhenAcceptedFirst(t *testing.T) {
	t.Parallel()
	quickScript(t)
	dir := filepath.Join(t.TempDir(), "spool")
	h := newStageHook()
	release := h.hold(stageStart)
	t.Cleanup(release)
	f := newSpoolAutomator(func(*automatorv1.CompleteRequest) error { return nil })
	runSpoolAgent(t, f, dir, h.hook)
	f.claims <- claim(t, "w1", &automatorv1.Command{Script: "s"})
	h.waitStage(t, stageStart)
	waittest.Recv(t, f.ok, "the result to be posted while its spool write is held at its start")
	waittest.Recv(t, h.settled, "the poster to settle the accepted result")
	release()
	if got := waittest.Recv(t, h.seen, "the held spool write to go on once released"); got != stageDone {
		t.Fatalf("after the result was accepted the write went on to stage %d, want it skipped (stage %d)", got, stageDone)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a skipped write left %q in the spool (stat: %v)", spoolFiles(t, dir), err)
	}
}

// TestResultIsPostedWhenTheSpoolFails: a write that fails costs the result
// nothing (it is posted from memory) and leaves nothing on disk.
func TestResultIsPostedWhenTheSpoolFails(t *testing.T) {
	t.Parallel()
	quickScript(t)
	dir := filepath.Join(t.TempDir(), "spool")
	h := newStageHook()
	h.failAt, h.failErr = stageSync, errors.New("disk on fire")
	// The write fails before the automator answers: Complete waits for it.
	f := newSpoolAutomator(func(*automatorv1.CompleteRequest) error {
		if err := h.reached(stageDone); err != nil {
			t.Error(err)
		}
		return nil
	})
	runSpoolAgent(t, f, dir, h.hook)
	f.claims <- claim(t, "w1", &automatorv1.Command{Script: "s"})
	if got := waittest.Recv(t, f.ok, "the result to be posted from memory after its spool write failed"); got.GetWorkId() != "w1" {
		t.Fatalf("posted %q, want w1", got.GetWorkId())
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("a failed write left %q in the spool (stat: %v)", spoolFiles(t, dir), err)
	}
}

// TestWrittenResultIsKeptUntilAnswered: once its write is over, an
// unanswered result is on disk, private (so a crash from then on does not
// lose it); the automator's answer removes it.
func TestWrittenResultIsKeptUntilAnswered(t *testing.T) {
	t.Parallel()
	quickScript(t)
	dir := filepath.Join(t.TempDir(), "spool")
	h := newStageHook()
	var onDisk []string
	var dirMode, fileMode os.FileMode
	f := newSpoolAutomator(func(*automatorv1.CompleteRequest) error {
		if err := h.reached(stageDone); err != nil {
			t.Error(err)
		}
		onDisk = spoolFiles(t, dir)
		if fi, err := os.Stat(dir); err == nil {
			dirMode = fi.Mode().Perm()
		}
		if fi, err := os.Stat(filepath.Join(dir, "w1.json")); err == nil {
			fileMode = fi.Mode().Perm()
		}
		return nil
	})
	runSpoolAgent(t, f, dir, h.hook)
	f.claims <- claim(t, "w1", &automatorv1.Command{Script: "s"})
	waittest.Recv(t, f.ok, "the result to be posted once its spool write is over")
	if len(onDisk) != 1 || onDisk[0] != "w1.json" {
		t.Fatalf("the spool held %q with the write over and no answer yet, want [w1.json]", onDisk)
	}
	if dirMode != 0o700 || fileMode != 0o600 {
		t.Fatalf("spool directory mode %v, file mode %v; want 0700 and 0600", dirMode, fileMode)
	}
	// Emptied, the directory goes too: the state directory is left as
	// `proxy install` made it.
	waittest.Recv(t, h.settled, "the poster to settle the accepted result")
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("after the answer the spool still holds %q (stat: %v), want no directory", spoolFiles(t, dir), err)
	}
}

// TestSpooledResultIsPostedAfterRestart: a proxy that stops while the
// automator is unreachable keeps the result; the next run of the same
// instance posts it, byte for byte, and empties the spool.
func TestSpooledResultIsPostedAfterRestart(t *testing.T) {
	t.Parallel()
	quickScript(t)
	dir := filepath.Join(t.TempDir(), "spool")
	down := newSpoolAutomator(func(*automatorv1.CompleteRequest) error { return status.Error(codes.Unavailable, "down") })
	h := newStageHook()
	stop := runSpoolAgent(t, down, dir, h.hook)
	down.claims <- claim(t, "w1", &automatorv1.Command{Script: "s"})
	// Written while unanswered: a crash from here on would keep it too.
	h.waitStage(t, stageDone)
	if files := spoolFiles(t, dir); len(files) != 1 || files[0] != "w1.json" {
		t.Fatalf("with the write over and the result unposted the spool holds %q, want [w1.json]", files)
	}
	waittest.Until(t, "a few failed posts", func() bool { return down.callCount() >= 3 })
	stop()
	if files := spoolFiles(t, dir); len(files) != 1 || files[0] != "w1.json" {
		t.Fatalf("after a stop with the result unposted the spool holds %q, want [w1.json]", files)
	}
	first := down.calls[0]

	up := newSpoolAutomator(func(*automatorv1.CompleteRequest) error { return nil })
	runSpoolAgent(t, up, dir)
	got := waittest.Recv(t, up.ok, "the restarted agent to post the result its first run left in the spool")
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
	waittest.Until(t, "the posted result to leave the spool", func() bool { return len(spoolFiles(t, dir)) == 0 })
}

// TestRefusedResultLeavesTheSpool: a result the automator refuses for good
// (the unit already ended) is not posted again on the next start.
func TestRefusedResultLeavesTheSpool(t *testing.T) {
	t.Parallel()
	quickScript(t)
	dir := filepath.Join(t.TempDir(), "spool")
	f := newSpoolAutomator(func(*automatorv1.CompleteRequest) error {
		return status.Error(codes.FailedPrecondition, "work is timed_out; result refused")
	})
	runSpoolAgent(t, f, dir)
	f.claims <- claim(t, "w1", &automatorv1.Command{Script: "s"})
	waittest.Until(t, "the refusal", func() bool { return f.callCount() == 1 })
	waittest.Until(t, "the refused result to leave the spool", func() bool { return len(spoolFiles(t, dir)) == 0 })
}

// TestExpiredSpooledResultIsDroppedNotPosted: at start, results far past
// their deadline (keepPastDeadline) are deleted and never sent; one just
// past it on this host's clock is posted, and removed once the automator
// refuses it; one of another instance that stopped before it posted it (a
// standby started on a dead proxy's state_dir) is posted as well, as it
// was made, naming the instance that ran its unit (it was left, and its
// unit timed out though its script had run: review 4), but one refused as
// no unit of this proxy's account is left for its instance (review 5: it
// was deleted); records that do not decode are set aside (those that
// cannot be read are not: spoolread_test.go).
func TestExpiredSpooledResultIsDroppedNotPosted(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "spool")
	s := newSpool(dir, slog.New(slog.DiscardHandler))
	now := time.Now()
	inline := func(f func()) { f() }
	s.put("acme", now.Add(-keepPastDeadline-time.Second), &automatorv1.CompleteRequest{WorkId: "w-old", ClaimId: "c", InstanceId: "a"}, inline)
	s.put("acme", now.Add(-time.Second), &automatorv1.CompleteRequest{WorkId: "w-late", ClaimId: "c", InstanceId: "a"}, inline)
	s.put("acme", now.Add(time.Minute), &automatorv1.CompleteRequest{WorkId: "w-other", ClaimId: "c", InstanceId: "b"}, inline)
	s.put("globex", now.Add(time.Minute), &automatorv1.CompleteRequest{WorkId: "w-notours", ClaimId: "c", InstanceId: "b"}, inline)
	s.put("acme", now.Add(time.Minute), &automatorv1.CompleteRequest{WorkId: "w-due", ClaimId: "c", InstanceId: "a", Outcome: automatorv1.Outcome_OUTCOME_FAILED, Failure: "f"}, inline)
	if err := os.WriteFile(filepath.Join(dir, "w-bad.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".tmp-123"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}

	f := newSpoolAutomator(func(req *automatorv1.CompleteRequest) error {
		switch req.GetWorkId() {
		case "w-late":
			return status.Error(codes.FailedPrecondition, "work w-late has ended (timed_out)")
		case "w-notours":
			return status.Error(codes.NotFound, "work w-notours not found for this account")
		}
		return nil
	})
	runSpoolAgent(t, f, dir)
	for range 2 {
		got := waittest.Recv(t, f.ok, "the agent to post the due results found in the spool at its start")
		switch {
		case got.GetWorkId() == "w-due" && got.GetFailure() == "f" && got.GetInstanceId() == "a":
		case got.GetWorkId() == "w-other" && got.GetInstanceId() == "b":
		default:
			t.Fatalf("posted %v, want the due results of w-due and w-other, each naming its instance", got)
		}
	}
	// Refused as no unit of this proxy's account (another account's, or
	// another automator's): left for its instance, not deleted.
	waittest.Until(t, "the refusal of another account's result", func() bool {
		return slices.ContainsFunc(f.callsMade(), func(c *automatorv1.CompleteRequest) bool { return c.GetWorkId() == "w-notours" })
	})
	waittest.Until(t, "the spool to settle", func() bool { return len(spoolFiles(t, dir)) == 2 })
	if files := strings.Join(spoolFiles(t, dir), " "); files != "w-bad.json.bad w-notours.json" {
		t.Fatalf("spool holds %q, want the bad record set aside and another account's result left", files)
	}
	var posted []string
	for _, c := range f.callsMade() {
		posted = append(posted, c.GetWorkId())
	}
	slices.Sort(posted)
	if want := []string{"w-due", "w-late", "w-notours", "w-other"}; !slices.Equal(posted, want) {
		t.Fatalf("Complete calls for %q, want %q (once each; the expired result is never sent)", posted, want)
	}
}

// TestASpooledResultIsPostedAfterTheProxysClockSteppedForward: a proxy
// spools a result while the automator is unreachable and stops; its host's
// wall clock then steps forward by an hour (an NTP step at boot, a
// real-time clock kept in local time, a virtual machine restored) before
// the proxy starts again. On the automator's clock the unit still has most
// of its minute left, and the automator accepts the result: a proxy's clock
// changes nothing (guarantee 6), where the start used to delete the record
// as past its deadline on this host's clock, and the caller got a timeout
// for a script that ran.
//
// The step is simulated without touching the machine's clock: the record's
// deadline, which the spool keeps as a wall time of this host, is moved
// back by the step, which is what a clock an hour ahead at the restart
// sees.
func TestASpooledResultIsPostedAfterTheProxysClockSteppedForward(t *testing.T) {
	t.Parallel()
	quickScript(t)
	dir := filepath.Join(t.TempDir(), "spool")
	down := newSpoolAutomator(func(*automatorv1.CompleteRequest) error { return status.Error(codes.Unavailable, "down") })
	h := newStageHook()
	stop := runSpoolAgent(t, down, dir, h.hook)
	down.claims <- claim(t, "w1", &automatorv1.Command{Script: "s"}) // 1 minute remaining
	h.waitStage(t, stageDone)
	stop()

	const step = time.Hour
	path := filepath.Join(dir, "w1.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rec spooled
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	rec.Deadline = rec.Deadline.Add(-step)
	if data, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}

	up := newSpoolAutomator(func(*automatorv1.CompleteRequest) error { return nil })
	runSpoolAgent(t, up, dir)
	got := waittest.Recv(t, up.ok, "the restarted proxy, its clock an hour ahead of the one that spooled the result, to post it")
	if got.GetWorkId() != "w1" {
		t.Fatalf("posted %q, want w1", got.GetWorkId())
	}
	waittest.Until(t, "the posted result to leave the spool", func() bool { return len(spoolFiles(t, dir)) == 0 })
}

// TestSpoolNamesOddWorkIDsSafely: a work id is never used as a path.
func TestSpoolNamesOddWorkIDsSafely(t *testing.T) {
	t.Parallel()
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

// TestSpoolNamesAreDistinctWhereCaseIsNot: on Windows (and macOS) file
// names are case-insensitive and a few names are devices whatever their
// extension; two work ids never share a file there, and no id names a
// device.
func TestSpoolNamesAreDistinctWhereCaseIsNot(t *testing.T) {
	t.Parallel()
	s := newSpool(t.TempDir(), slog.New(slog.DiscardHandler))
	// "x-775f4142" is how w_AB is hex-encoded: as an id of its own it
	// must not land on that file.
	ids := []string{"w_ab", "w_AB", "w_Ab", "W_ab", "x-775f4142"}
	seen := map[string]string{}
	for _, id := range ids {
		folded := strings.ToLower(filepath.Base(s.path(id)))
		if other, dup := seen[folded]; dup {
			t.Errorf("work ids %q and %q spool to one file on a case-insensitive file system (%s)", other, id, folded)
		}
		seen[folded] = id
	}
	for _, id := range []string{"con", "CON", "nul", "aux.x", "prn", "com1", "LPT9"} {
		base := strings.ToLower(filepath.Base(s.path(id)))
		if stem, _, _ := strings.Cut(base, "."); regexp.MustCompile(`^(con|prn|aux|nul|com[0-9]|lpt[0-9])$`).MatchString(stem) {
			t.Errorf("work id %q spools to %q, a Windows device name", id, base)
		}
	}
}

// TestResultsSpooledByAnOlderProxyArePostedAndRemoved: the records in
// testdata/spool-v1 are as the first proxy that spooled results wrote them
// (format version 1, the one there is), named by the rules of that time:
// a work id with capitals, or starting with "x-", named its file as is,
// where a proxy now hex-encodes it. A proxy upgraded with such results in
// its spool posts each, byte for byte, and removes each record once the
// automator has answered, under whatever name it was found: a record left
// behind would be posted again at every start until its deadline.
func TestResultsSpooledByAnOlderProxyArePostedAndRemoved(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "spool")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	want := map[string]*automatorv1.CompleteRequest{}
	fixtures, err := filepath.Glob(filepath.Join("testdata", "spool-v1", "*.json"))
	if err != nil || len(fixtures) != 3 {
		t.Fatalf("testdata/spool-v1 holds %q (%v), want 3 records", fixtures, err)
	}
	for _, src := range fixtures {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(src)), data, 0o600); err != nil {
			t.Fatal(err)
		}
		rec, err := readSpooled(src)
		if err != nil {
			t.Fatalf("the old record %s does not read: %v", src, err)
		}
		var req automatorv1.CompleteRequest
		if err := proto.Unmarshal(rec.Complete, &req); err != nil {
			t.Fatal(err)
		}
		want[rec.WorkID] = &req
	}

	f := newSpoolAutomator(func(*automatorv1.CompleteRequest) error { return nil })
	runSpoolAgent(t, f, dir)
	for range want {
		got := waittest.Recv(t, f.ok, "the upgraded agent to post a result an older proxy left in the spool")
		if w, ok := want[got.GetWorkId()]; !ok || !proto.Equal(got, w) {
			t.Fatalf("posted %v, want one of the spooled requests, byte for byte", got)
		}
		delete(want, got.GetWorkId())
	}
	waittest.Until(t, "the posted results to leave the spool", func() bool { return len(spoolFiles(t, dir)) == 0 })
	if n := f.callCount(); n != 3 {
		t.Fatalf("%d Complete calls, want 3 (each result posted once)", n)
	}
}
