package agent

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// completeOnly is a Client that is never polled and accepts every Complete
// (also the benchmarks' automator).
type completeOnly struct{}

func (completeOnly) Poll(context.Context, *automatorv1.PollRequest, ...grpc.CallOption) (*automatorv1.PollResponse, error) {
	panic("not polled")
}

func (completeOnly) Complete(context.Context, *automatorv1.CompleteRequest, ...grpc.CallOption) (*automatorv1.CompleteResponse, error) {
	return &automatorv1.CompleteResponse{}, nil
}

// scriptedBatch is a BatchClient whose first CompleteBatch call waits for
// release; each call's work ids are recorded, and results whose work id is
// in refuse are refused with FAILED_PRECONDITION.
type scriptedBatch struct {
	completeOnly
	release chan struct{}
	started chan struct{} // closed when the first call starts

	mu     sync.Mutex
	calls  [][]string
	refuse map[string]bool
}

func (s *scriptedBatch) CompleteBatch(ctx context.Context, in *automatorv1.CompleteBatchRequest, _ ...grpc.CallOption) (*automatorv1.CompleteBatchResponse, error) {
	var ids []string
	resp := &automatorv1.CompleteBatchResponse{}
	for _, r := range in.GetResults() {
		ids = append(ids, r.GetWorkId())
		out := &automatorv1.CompleteOutcome{}
		if s.refuse[r.GetWorkId()] {
			out.Code, out.Message = int32(codes.FailedPrecondition), "work "+r.GetWorkId()+" is cancelled; result refused"
		}
		resp.Outcomes = append(resp.Outcomes, out)
	}
	s.mu.Lock()
	s.calls = append(s.calls, ids)
	first := len(s.calls) == 1
	s.mu.Unlock()
	if first {
		close(s.started)
		<-s.release
	}
	return resp, nil
}

// TestEachWaitingResultGetsItsOwnAnswer: results that waited and went
// together each get their own outcome, and one whose caller gave up while it
// waited is not sent at all.
func TestEachWaitingResultGetsItsOwnAnswer(t *testing.T) {
	t.Parallel()
	c := &scriptedBatch{release: make(chan struct{}), started: make(chan struct{}), refuse: map[string]bool{"w_c": true}}
	p := newPoster(c, nil, tuning{})
	post := func(ctx context.Context, id string) <-chan error {
		got := make(chan error, 1)
		go func() { got <- p.complete(ctx, &automatorv1.CompleteRequest{WorkId: id}) }()
		return got
	}

	a := post(context.Background(), "w_a")
	waittest.Recv(t, c.started, "the first result's CompleteBatch call to start")
	gaveUp, giveUp := context.WithCancel(context.Background())
	b := post(gaveUp, "w_b")
	waittest.Until(t, "w_b waiting", func() bool { return p.group.Waiting() == 1 })
	cc := post(context.Background(), "w_c")
	waittest.Until(t, "w_c waiting", func() bool { return p.group.Waiting() == 2 })
	giveUp()
	if err := waittest.Recv(t, b, "the post of w_b to return after its caller gave up"); !errors.Is(err, context.Canceled) {
		t.Fatalf("w_b, whose caller gave up: %v, want context.Canceled", err)
	}
	d := post(context.Background(), "w_d")
	waittest.Until(t, "w_d waiting", func() bool { return p.group.Waiting() == 3 })
	close(c.release)

	if err := waittest.Recv(t, a, "the post of w_a to return after its call was released"); err != nil {
		t.Fatalf("w_a: %v", err)
	}
	if err := waittest.Recv(t, cc, "the post of w_c to return with its own answer"); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("w_c: %v, want its own FailedPrecondition", err)
	}
	if err := waittest.Recv(t, d, "the post of w_d to return with its own answer"); err != nil {
		t.Fatalf("w_d: %v", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.calls) != 2 || len(c.calls[1]) != 2 || c.calls[1][0] != "w_c" || c.calls[1][1] != "w_d" {
		t.Fatalf("calls %v, want [[w_a] [w_c w_d]]", c.calls)
	}
}

// stuckBatch is a BatchClient whose CompleteBatch calls last until their
// context ends, reporting that on ended.
type stuckBatch struct {
	completeOnly
	started chan struct{} // capacity 1
	ended   chan error    // capacity 1
}

func (s *stuckBatch) CompleteBatch(ctx context.Context, _ *automatorv1.CompleteBatchRequest, _ ...grpc.CallOption) (*automatorv1.CompleteBatchResponse, error) {
	s.started <- struct{}{}
	<-ctx.Done()
	s.ended <- ctx.Err()
	return nil, status.FromContextError(ctx.Err()).Err()
}

// TestAPostEndsWhenEveryCallerGaveUp: a call on its way is cut off once
// every result it carries has been given up by its caller (the proxy
// stopping), not left running to its own timeout.
func TestAPostEndsWhenEveryCallerGaveUp(t *testing.T) {
	t.Parallel()
	c := &stuckBatch{started: make(chan struct{}, 1), ended: make(chan error, 1)}
	p := newPoster(c, nil, tuning{})
	ctx, giveUp := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() { got <- p.complete(ctx, &automatorv1.CompleteRequest{WorkId: "w_a"}) }()
	waittest.Recv(t, c.started, "the CompleteBatch call to start")
	giveUp()
	if err := waittest.Recv(t, got, "the post to return after its only caller gave up"); !errors.Is(err, context.Canceled) && status.Code(err) != codes.Canceled {
		t.Fatalf("the post: %v, want cancelled", err)
	}
	select {
	case err := <-c.ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the call ended with %v, want cancelled", err)
		}
	case <-time.After(postAttempt / 2):
		t.Fatal("the call went on after its only caller gave up")
	}
}

// recordingClient accepts every call and records the work ids each carried.
type recordingClient struct {
	completeOnly
	mu  sync.Mutex
	ids []string
}

func (c *recordingClient) Complete(_ context.Context, in *automatorv1.CompleteRequest, _ ...grpc.CallOption) (*automatorv1.CompleteResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ids = append(c.ids, in.GetWorkId())
	return &automatorv1.CompleteResponse{}, nil
}

func (c *recordingClient) CompleteBatch(_ context.Context, in *automatorv1.CompleteBatchRequest, _ ...grpc.CallOption) (*automatorv1.CompleteBatchResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range in.GetResults() {
		c.ids = append(c.ids, r.GetWorkId())
	}
	return &automatorv1.CompleteBatchResponse{Outcomes: make([]*automatorv1.CompleteOutcome, len(in.GetResults()))}, nil
}

func (c *recordingClient) got() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.ids...)
}

// TestLargePostsGoOverTheUploadsClient: a call posting more than
// postAlonePast bytes (a large result, or a batch that large) goes over the
// uploads client, the other connection, and the rest over the client that
// polls, so that no large upload is queued ahead of the polling
// connection's keepalive ping.
func TestLargePostsGoOverTheUploadsClient(t *testing.T) {
	t.Parallel()
	polling, uploads := &recordingClient{}, &recordingClient{}
	p := newPoster(polling, uploads, tuning{})
	result := func(id string, size int) *automatorv1.CompleteRequest {
		return &automatorv1.CompleteRequest{WorkId: id, SealedResult: make([]byte, size)}
	}
	for _, r := range []*automatorv1.CompleteRequest{result("w_small", 1<<10), result("w_large", postAlonePast+1)} {
		if err := p.complete(context.Background(), r); err != nil {
			t.Fatalf("%s: %v", r.GetWorkId(), err)
		}
	}
	half := postAlonePast/2 + 1
	for i, err := range p.post([]*postOp{
		{ctx: context.Background(), req: result("w_half1", half), size: half},
		{ctx: context.Background(), req: result("w_half2", half), size: half},
	}) {
		if err != nil {
			t.Fatalf("batch result %d: %v", i, err)
		}
	}
	if got := polling.got(); len(got) != 1 || got[0] != "w_small" {
		t.Errorf("posted over the polling connection: %v, want [w_small]", got)
	}
	if got := uploads.got(); len(got) != 3 || got[0] != "w_large" || got[1] != "w_half1" || got[2] != "w_half2" {
		t.Errorf("posted over the uploads connection: %v, want [w_large w_half1 w_half2]", got)
	}
}

// heldBatch is a BatchClient whose first CompleteBatch call waits for
// release; it records each CompleteBatch call's work ids and deadline, and
// the work id of each Complete.
type heldBatch struct {
	release chan struct{}
	started chan struct{} // closed when the first call starts

	mu        sync.Mutex
	batches   [][]string
	deadlines []time.Time
	completes []string
}

func (h *heldBatch) Poll(context.Context, *automatorv1.PollRequest, ...grpc.CallOption) (*automatorv1.PollResponse, error) {
	panic("not polled")
}

func (h *heldBatch) Complete(_ context.Context, in *automatorv1.CompleteRequest, _ ...grpc.CallOption) (*automatorv1.CompleteResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.completes = append(h.completes, in.GetWorkId())
	return &automatorv1.CompleteResponse{}, nil
}

func (h *heldBatch) CompleteBatch(ctx context.Context, in *automatorv1.CompleteBatchRequest, _ ...grpc.CallOption) (*automatorv1.CompleteBatchResponse, error) {
	var ids []string
	for _, r := range in.GetResults() {
		ids = append(ids, r.GetWorkId())
	}
	dl, _ := ctx.Deadline()
	h.mu.Lock()
	h.batches = append(h.batches, ids)
	h.deadlines = append(h.deadlines, dl)
	first := len(h.batches) == 1
	h.mu.Unlock()
	if first {
		close(h.started)
		<-h.release
	}
	return &automatorv1.CompleteBatchResponse{Outcomes: make([]*automatorv1.CompleteOutcome, len(ids))}, nil
}

// postHeld posts w_0 with p, whose client is c, and returns once its
// CompleteBatch call has begun and is held: results posted meanwhile wait
// for it. release lets it go (also at the test's end); first is its post's
// answer.
func postHeld(t *testing.T, p *poster, c *heldBatch) (release func(), first <-chan error) {
	t.Helper()
	var once sync.Once
	release = func() { once.Do(func() { close(c.release) }) }
	t.Cleanup(release)
	answer := make(chan error, 1)
	go func() { answer <- p.complete(context.Background(), &automatorv1.CompleteRequest{WorkId: "w_0"}) }()
	waittest.Recv(t, c.started, "the first result's CompleteBatch call to start")
	return release, answer
}

// TestAResultDueBeforeItsBatchsEndIsPostedAlone: a batch's call lasts as
// long as the longest bound of its results' attempts (one given longer
// after it ran out). A result whose unit's deadline comes before that is
// posted alone, beside the call, within its own bound: carried by the
// call, it could go out past its deadline once a link that was connecting
// came back (guarantee 7), and a call ended at that deadline failed the
// others with it (a review), which a stopping proxy does not post again.
func TestAResultDueBeforeItsBatchsEndIsPostedAlone(t *testing.T) {
	t.Parallel()
	c := &heldBatch{release: make(chan struct{}), started: make(chan struct{})}
	p := newPoster(c, nil, tuning{})
	release, first := postHeld(t, p, c)
	near := time.Now().Add(time.Minute) // the unit's deadline, and its attempt's bound
	nctx, ncancel := context.WithDeadline(context.Background(), near)
	defer ncancel()
	fctx, fcancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer fcancel()
	a, b := make(chan error, 1), make(chan error, 1)
	go func() { a <- p.completeWaiting(nctx, &automatorv1.CompleteRequest{WorkId: "w_near"}, near, false) }()
	waittest.Until(t, "w_near waiting", func() bool { return p.group.Waiting() == 1 })
	go func() {
		b <- p.completeWaiting(fctx, &automatorv1.CompleteRequest{WorkId: "w_far"}, time.Now().Add(time.Hour), false)
	}()
	waittest.Until(t, "w_far waiting", func() bool { return p.group.Waiting() == 2 })
	release()
	for _, r := range []struct {
		id string
		ch <-chan error
	}{{"w_0", first}, {"w_near", a}, {"w_far", b}} {
		if err := waittest.Recv(t, r.ch, "the post of "+r.id+" to return"); err != nil {
			t.Errorf("%s: %v", r.id, err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.batches) != 2 || len(c.batches[1]) != 1 || c.batches[1][0] != "w_far" || len(c.completes) != 1 || c.completes[0] != "w_near" {
		t.Fatalf("CompleteBatch calls %v and Complete calls %v; want [[w_0] [w_far]] and [w_near]: the result due first alone", c.batches, c.completes)
	}
	if !c.deadlines[1].After(near) {
		t.Errorf("the batch of w_far ends at %v, by w_near's deadline %v; want its own bound", c.deadlines[1], near)
	}
}

// TestARetryWaitingForAConnectionGoesAlone: a retry, which waits for a
// connection (grpc.WaitForReady), is posted with a Complete of its own,
// within its own bound, not in a batch, whose call waits as long as the
// longest bound of its results: it would go out past its own once the
// link came back (a review: 324 ms past its deadline). It does not wait
// for a batch on its way either.
func TestARetryWaitingForAConnectionGoesAlone(t *testing.T) {
	t.Parallel()
	c := &heldBatch{release: make(chan struct{}), started: make(chan struct{})}
	p := newPoster(c, nil, tuning{})
	release, first := postHeld(t, p, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	retry := make(chan error, 1)
	go func() {
		retry <- p.completeWaiting(ctx, &automatorv1.CompleteRequest{WorkId: "w_retry"}, time.Now().Add(time.Hour), true)
	}()
	if err := waittest.Recv(t, retry, "the retry to be posted while a batch is on its way"); err != nil {
		t.Fatalf("the retry: %v", err)
	}
	release()
	if err := waittest.Recv(t, first, "the first post to return"); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.batches) != 1 || len(c.batches[0]) != 1 || c.batches[0][0] != "w_0" || len(c.completes) != 1 || c.completes[0] != "w_retry" {
		t.Fatalf("CompleteBatch calls %v and Complete calls %v; want only [[w_0]] and [w_retry]: the retry alone, with Complete", c.batches, c.completes)
	}
}
