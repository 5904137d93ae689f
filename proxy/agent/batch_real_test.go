package agent_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/agent"
)

const completeBatchMethod = "/automator.v1.ProxyService/CompleteBatch"

// batchWatch is a server interceptor that records the results of every
// CompleteBatch call and can hold the first one until released.
type batchWatch struct {
	hold     chan struct{} // nil: hold nothing
	held     chan struct{} // closed when the first call is being held
	heldOnce sync.Once

	mu      sync.Mutex
	batches []int // results per CompleteBatch call
	singles int   // Complete calls
}

func (w *batchWatch) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	switch info.FullMethod {
	case completeBatchMethod:
		w.mu.Lock()
		w.batches = append(w.batches, len(req.(*automatorv1.CompleteBatchRequest).GetResults()))
		first := len(w.batches) == 1
		w.mu.Unlock()
		if first && w.hold != nil {
			w.heldOnce.Do(func() { close(w.held) })
			<-w.hold
		}
	case "/automator.v1.ProxyService/Complete":
		w.mu.Lock()
		w.singles++
		w.mu.Unlock()
	}
	return h(ctx, req)
}

func (w *batchWatch) counts() (batches []int, singles int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]int(nil), w.batches...), w.singles
}

// realAgent runs an agent against automator a over real gRPC and TLS, with
// the given number of slots.
func realAgent(t *testing.T, a *automatortest.Automator, slots int) *agent.Agent {
	t.Helper()
	ag := agent.New(agent.Options{
		Client: automatorv1.NewProxyServiceClient(a.ProxyConn(t)), Keys: crypto.Keys{a.Key}, InstanceID: "batcher",
		ScriptsDir: t.TempDir(), MaxConcurrency: slots, PollWait: time.Second, GracePeriod: 5 * time.Second,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { ag.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); waittest.Recv(t, done, "the agent's Run to return after its context was cancelled") })
	return ag
}

func submitPings(t *testing.T, caller automatorv1.AutomatorServiceClient, n int) []string {
	t.Helper()
	var ids []string
	for range n {
		st, err := caller.Submit(context.Background(), &automatorv1.ExecuteRequest{Account: "acme", Command: &automatorv1.Command{Script: "@ping"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, st.GetWorkId())
	}
	return ids
}

func waitSucceeded(t *testing.T, caller automatorv1.AutomatorServiceClient, ids []string) {
	t.Helper()
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		st, err := caller.Wait(ctx, &automatorv1.WaitRequest{WorkId: id})
		cancel()
		if err != nil || st.GetState() != automatorv1.State_STATE_SUCCEEDED {
			t.Fatalf("unit %s: %v, %v (%s), want succeeded", id, err, st.GetState(), st.GetReason())
		}
	}
}

// TestResultsFinishedDuringAPostGoTogether: against a real automator, while
// one result's post is on its way (held by the server), the results that
// finish meanwhile wait for it and then go in one call; every unit ends
// succeeded.
func TestResultsFinishedDuringAPostGoTogether(t *testing.T) {
	t.Parallel()
	w := &batchWatch{hold: make(chan struct{}), held: make(chan struct{})}
	a := automatortest.Start(t, automatortest.Options{Interceptors: []grpc.UnaryServerInterceptor{w.intercept}})
	caller := automatorv1.NewAutomatorServiceClient(a.CallerConn(t))
	ag := realAgent(t, a, 8)

	first := submitPings(t, caller, 1)
	waittest.Recv(t, w.held, "the first result's CompleteBatch call to reach the automator")
	rest := submitPings(t, caller, 4)
	automatortest.WaitFor(t, 10*time.Second, "the four later results waiting for the held post", func() bool { return ag.PostsWaiting() == 4 })
	close(w.hold)
	waitSucceeded(t, caller, append(first, rest...))

	batches, singles := w.counts()
	if len(batches) != 2 || batches[0] != 1 || batches[1] != 4 || singles != 0 {
		t.Fatalf("CompleteBatch calls carried %v results and Complete was called %d times; want [1 4] and 0", batches, singles)
	}
}

// TestAnOlderAutomatorGetsResultsOneByOne: an automator that answers
// CompleteBatch with UNIMPLEMENTED (one older than the method) is asked
// once, then gets each result with Complete; none is lost.
func TestAnOlderAutomatorGetsResultsOneByOne(t *testing.T) {
	t.Parallel()
	w := &batchWatch{}
	older := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if info.FullMethod == completeBatchMethod {
			_, _ = w.intercept(ctx, req, info, func(context.Context, any) (any, error) { return nil, nil })
			return nil, status.Errorf(codes.Unimplemented, "unknown method CompleteBatch for service automator.v1.ProxyService")
		}
		return w.intercept(ctx, req, info, h)
	}
	a := automatortest.Start(t, automatortest.Options{Interceptors: []grpc.UnaryServerInterceptor{older}})
	caller := automatorv1.NewAutomatorServiceClient(a.CallerConn(t))
	realAgent(t, a, 4)

	ids := submitPings(t, caller, 3)
	waitSucceeded(t, caller, ids)
	more := submitPings(t, caller, 2)
	waitSucceeded(t, caller, more)

	batches, singles := w.counts()
	if len(batches) != 1 || singles != 5 {
		t.Fatalf("CompleteBatch tried %d times and Complete called %d times; want once and 5", len(batches), singles)
	}
}
