package agent

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/grpcwire"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// thinLink stands for an automator behind an uplink of rate bytes a second:
// a call carrying n bytes is accepted when its deadline leaves the n/rate it
// takes to send them, counted from since, and otherwise runs until its
// deadline and fails, as a call cut off mid-upload does. It counts the
// calls that carried each work id and records the ones it accepted.
//
// since is when the test handed the result to the poster, not when a call
// reaches the link: the time a loaded machine takes between the two, before
// a byte is sent, is not the link's, and must not eat the call's margin.
type thinLink struct {
	rate  int
	since time.Time

	mu       sync.Mutex
	calls    map[string]int
	accepted map[string]bool
}

func (l *thinLink) Poll(context.Context, *automatorv1.PollRequest, ...grpc.CallOption) (*automatorv1.PollResponse, error) {
	panic("not polled")
}

func (l *thinLink) send(ctx context.Context, size int, ids ...string) error {
	l.mu.Lock()
	for _, id := range ids {
		l.calls[id]++
	}
	l.mu.Unlock()
	takes := time.Duration(size) * time.Second / time.Duration(l.rate)
	if end, ok := ctx.Deadline(); ok && end.Sub(l.since) < takes {
		<-ctx.Done()
		return status.FromContextError(ctx.Err()).Err()
	}
	l.mu.Lock()
	for _, id := range ids {
		l.accepted[id] = true
	}
	l.mu.Unlock()
	return nil
}

func (l *thinLink) Complete(ctx context.Context, in *automatorv1.CompleteRequest, _ ...grpc.CallOption) (*automatorv1.CompleteResponse, error) {
	if err := l.send(ctx, proto.Size(in), in.GetWorkId()); err != nil {
		return nil, err
	}
	return &automatorv1.CompleteResponse{}, nil
}

func (l *thinLink) CompleteBatch(ctx context.Context, in *automatorv1.CompleteBatchRequest, _ ...grpc.CallOption) (*automatorv1.CompleteBatchResponse, error) {
	var ids []string
	for _, r := range in.GetResults() {
		ids = append(ids, r.GetWorkId())
	}
	if err := l.send(ctx, proto.Size(in), ids...); err != nil {
		return nil, err
	}
	return &automatorv1.CompleteBatchResponse{Outcomes: make([]*automatorv1.CompleteOutcome, len(ids))}, nil
}

// TestALargeResultIsPostedOverALinkThatTakesLongerThanAFixedBound: a
// result that takes longer to send than postAttempt (1 MiB over a thin
// uplink) is given the time its size needs, and is sent once, instead of
// being cut off and sent again from its first byte until the deadline.
func TestALargeResultIsPostedOverALinkThatTakesLongerThanAFixedBound(t *testing.T) {
	// Not parallel: the 500 ms transfer must end within its post's bound
	// of 1.02 s, a margin the load of the other tests could eat.
	// Scaled down: postAttempt 20 ms, posts given time for 1 MiB/s, a link
	// of 2 MiB/s, so 1 MiB takes 500 ms, 25 times postAttempt.
	link := &thinLink{rate: 2 << 20, calls: map[string]int{}, accepted: map[string]bool{}}
	a := New(Options{tune: tuning{postAttempt: 20 * time.Millisecond, minPostRate: 1 << 20}, Client: link, Keys: crypto.Keys{testKey}, InstanceID: "a", Logger: slog.New(slog.DiscardHandler),
		BackoffMin: time.Millisecond, BackoffMax: 10 * time.Millisecond})
	c := &automatorv1.Claim{WorkId: "w_large", ClaimId: "c", Account: "acme"}
	req := &automatorv1.CompleteRequest{Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: make([]byte, 1<<20)}
	link.since = time.Now()
	a.post(context.Background(), c, link.since.Add(3*time.Second), req)
	a.wg.Wait()
	link.mu.Lock()
	defer link.mu.Unlock()
	if !link.accepted["w_large"] {
		t.Fatalf("the 1 MiB result was never accepted: %d calls carried it, each cut off before it was sent", link.calls["w_large"])
	}
	if n := link.calls["w_large"]; n != 1 {
		t.Fatalf("the 1 MiB result was sent %d times, want once", n)
	}
}

// heldLink holds every call that carries more than 64 KiB until release,
// and accepts the others at once.
type heldLink struct {
	completeOnly
	release chan struct{}
	held    chan struct{} // capacity 1: a large call is held
}

func (h *heldLink) hold(ctx context.Context, size int) error {
	if size <= 64<<10 {
		return nil
	}
	h.held <- struct{}{}
	select {
	case <-h.release:
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

func (h *heldLink) Complete(ctx context.Context, in *automatorv1.CompleteRequest, _ ...grpc.CallOption) (*automatorv1.CompleteResponse, error) {
	if err := h.hold(ctx, proto.Size(in)); err != nil {
		return nil, err
	}
	return &automatorv1.CompleteResponse{}, nil
}

func (h *heldLink) CompleteBatch(ctx context.Context, in *automatorv1.CompleteBatchRequest, _ ...grpc.CallOption) (*automatorv1.CompleteBatchResponse, error) {
	if err := h.hold(ctx, proto.Size(in)); err != nil {
		return nil, err
	}
	return &automatorv1.CompleteBatchResponse{Outcomes: make([]*automatorv1.CompleteOutcome, len(in.GetResults()))}, nil
}

// TestASmallResultIsNotHeldBehindALargeOneOnItsWay: while a large result
// is on its way over a thin uplink (a minute or more), a small one that
// finishes meanwhile is posted on its own call, next to it, instead of
// waiting for it to be sent: a short unit's result is not made to wait
// for, nor time out behind, a long transfer that is not its own.
func TestASmallResultIsNotHeldBehindALargeOneOnItsWay(t *testing.T) {
	t.Parallel()
	link := &heldLink{release: make(chan struct{}), held: make(chan struct{}, 1)}
	defer close(link.release)
	p := newPoster(link, nil, tuning{})
	large := make(chan error, 1)
	go func() {
		large <- p.complete(context.Background(), &automatorv1.CompleteRequest{WorkId: "w_large", SealedResult: make([]byte, 1<<20)})
	}()
	waittest.Recv(t, link.held, "the large result's call to be on its way")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.complete(ctx, &automatorv1.CompleteRequest{WorkId: "w_small", SealedResult: make([]byte, 200)}); err != nil {
		t.Fatalf("the small result, posted while the large one was on its way: %v (code %v), want accepted", err, status.Code(err))
	}
	select {
	case err := <-large:
		t.Fatalf("the large result's post returned (%v) before its call was released", err)
	default:
	}
}

// slowAnswer is an automator whose answer to a poll begins at once (its
// headers arrive: AnswerStarted) and takes transfer to arrive whole, as a
// poll answer carrying a large command does over a thin downlink; with
// transfer 0 no answer ever begins. When began is set, each poll tells it
// whether its answer began while the poll still waited for it.
type slowAnswer struct {
	completeOnly
	transfer time.Duration
	began    chan<- bool
}

func (s slowAnswer) Poll(ctx context.Context, _ *automatorv1.PollRequest, _ ...grpc.CallOption) (*automatorv1.PollResponse, error) {
	if s.transfer == 0 {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	grpcwire.AnswerStarted(ctx)
	if s.began != nil {
		s.began <- ctx.Err() == nil
	}
	select {
	case <-time.After(s.transfer): // the answer's bytes arriving
		return &automatorv1.PollResponse{Claims: []*automatorv1.Claim{{WorkId: "w_large"}}}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// TestAPollWhoseAnswerIsOnItsWayIsNotCutOffAtTheEndOfItsWait: a poll's
// answer that began to arrive is given the time it takes (a large command
// over a thin downlink), not cut off when the wait and its margin are
// over, which lost its claims (their units failed without running); an
// answer that never begins still ends the poll then.
//
// The poll's bound is scaled down to 70 ms, which a loaded machine may let
// pass before the fake automator even begins its answer: that poll proves
// nothing, and is made again with a margin 4 times as long, so that what
// decides the test is the bound's end while the answer is on its way, not
// the machine's speed.
func TestAPollWhoseAnswerIsOnItsWayIsNotCutOffAtTheEndOfItsWait(t *testing.T) {
	t.Parallel()
	opts := Options{Keys: crypto.Keys{testKey}, InstanceID: "a", Logger: slog.New(slog.DiscardHandler), PollWait: 50 * time.Millisecond}

	for opts.tune.pollMargin = 10 * time.Millisecond; ; opts.tune.pollMargin *= 4 {
		// The answer takes 10 times the poll's bound to arrive.
		begin := opts.PollWait + opts.PollWait/5 + opts.tune.pollMargin
		began := make(chan bool, 1)
		opts.Client = slowAnswer{transfer: 10 * begin, began: began}
		resp, err := New(opts).poll(context.Background(), 1, opts.PollWait, 1, 0)
		if !<-began {
			if opts.tune.pollMargin > time.Minute {
				t.Fatalf("no poll's answer began within its bound, the last %v", begin)
			}
			t.Logf("the answer began after the poll's bound of %v had passed (a loaded machine): polling again with a longer one", begin)
			continue
		}
		if err != nil || len(resp.GetClaims()) != 1 {
			t.Fatalf("a poll whose answer was on its way (begun within the poll's bound of %v, taking %v): %v, %v; want its claim", begin, 10*begin, resp, err)
		}
		break
	}

	opts.tune.pollMargin = 10 * time.Millisecond
	opts.Client = slowAnswer{}
	if _, err := New(opts).poll(context.Background(), 1, opts.PollWait, 1, 0); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a poll whose answer never began: %v, want DeadlineExceeded", err)
	}
}

// slowStore stands for an automator that takes takes to store each post
// (its writes queued behind others' on a loaded machine): a call whose
// deadline comes first fails at it. It counts the calls and records
// whether one was accepted.
type slowStore struct {
	completeOnly
	takes time.Duration

	mu       sync.Mutex
	calls    int
	accepted bool
}

func (s *slowStore) store(ctx context.Context) error {
	s.mu.Lock()
	s.calls++
	s.mu.Unlock()
	stored := time.NewTimer(s.takes)
	defer stored.Stop()
	select {
	case <-stored.C:
	case <-ctx.Done():
	}
	// Both may be ready when this goroutine runs (a loaded machine woke it
	// late): a call whose end has passed was cut off, however the select
	// chose (seen in CI: a first call accepted past its bound), and
	// whether or not the context's own timer has run to mark it done yet
	// (its cancel runs on a goroutine of its own; seen in CI too).
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	if end, ok := ctx.Deadline(); ok && !time.Now().Before(end) {
		return status.FromContextError(context.DeadlineExceeded).Err()
	}
	s.mu.Lock()
	s.accepted = true
	s.mu.Unlock()
	return nil
}

func (s *slowStore) Complete(ctx context.Context, _ *automatorv1.CompleteRequest, _ ...grpc.CallOption) (*automatorv1.CompleteResponse, error) {
	if err := s.store(ctx); err != nil {
		return nil, err
	}
	return &automatorv1.CompleteResponse{}, nil
}

// slowBatchStore is a slowStore that takes results in batches too.
type slowBatchStore struct{ *slowStore }

func (s slowBatchStore) CompleteBatch(ctx context.Context, in *automatorv1.CompleteBatchRequest, _ ...grpc.CallOption) (*automatorv1.CompleteBatchResponse, error) {
	if err := s.store(ctx); err != nil {
		return nil, err
	}
	return &automatorv1.CompleteBatchResponse{Outcomes: make([]*automatorv1.CompleteOutcome, len(in.GetResults()))}, nil
}

// TestAResultIsPostedToAnAutomatorSlowerThanAPostsBound: an automator that
// takes one and a half times a post's bound to store a result (scaled
// down: 150 ms against 100 ms) gets it, on its own call or in a batch:
// the attempt after one that ran out of its time is given twice as long.
// Before, every attempt had the same bound and was cut off, until the
// unit's deadline, and the result was never posted.
func TestAResultIsPostedToAnAutomatorSlowerThanAPostsBound(t *testing.T) {
	t.Parallel()
	for _, batched := range []bool{false, true} {
		name := "alone"
		if batched {
			name = "batched"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := &slowStore{takes: 150 * time.Millisecond}
			var client Client = s
			if batched {
				client = slowBatchStore{s}
			}
			a := New(Options{tune: tuning{postAttempt: 100 * time.Millisecond}, Client: client, Keys: crypto.Keys{testKey}, InstanceID: "a", Logger: slog.New(slog.DiscardHandler),
				BackoffMin: time.Millisecond, BackoffMax: 10 * time.Millisecond})
			c := &automatorv1.Claim{WorkId: "w_slow", ClaimId: "c", Account: "acme"}
			a.post(context.Background(), c, time.Now().Add(5*time.Second), &automatorv1.CompleteRequest{Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED})
			a.wg.Wait()
			s.mu.Lock()
			defer s.mu.Unlock()
			if !s.accepted || s.calls < 2 {
				t.Fatalf("accepted %v after %d calls; want it accepted, after a first call cut off at its bound", s.accepted, s.calls)
			}
		})
	}
}
