package agent_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/crypto"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/agent"
)

// crossingClient is the real client of a real automator, whose waiting
// polls that ask for units see the proxy's cancel only after the
// automator has answered them: the cancel and the answer cross on the
// wire. The agent gets the cancel's error, never the answer (as gRPC does
// when the stream is reset before the answer is read); the answer's
// claims are kept in dropped.
type crossingClient struct {
	automatorv1.ProxyServiceClient
	waiting chan struct{} // closed when the first such poll is sent
	once    sync.Once

	mu      sync.Mutex
	dropped []string
}

func (c *crossingClient) Poll(ctx context.Context, in *automatorv1.PollRequest, opts ...grpc.CallOption) (*automatorv1.PollResponse, error) {
	if in.GetMaxUnits() == 0 || in.GetWait().AsDuration() == 0 {
		return c.ProxyServiceClient.Poll(ctx, in, opts...)
	}
	type answer struct {
		resp *automatorv1.PollResponse
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := c.ProxyServiceClient.Poll(context.WithoutCancel(ctx), in, opts...)
		got <- answer{resp, err}
	}()
	c.once.Do(func() { close(c.waiting) })
	select {
	case an := <-got:
		return an.resp, an.err
	case <-ctx.Done():
		an := <-got // written by the automator, never read by the proxy
		c.mu.Lock()
		for _, cl := range an.resp.GetClaims() {
			c.dropped = append(c.dropped, cl.GetWorkId())
		}
		c.mu.Unlock()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// TestAUnitHandedToThePollAProxyStopsDuringFailsAtOnce: a proxy stopped
// gracefully while its poll for units waits can have a unit handed to that
// poll (stored as claimed by the instance) in an answer that crosses the
// cancel and is never read. Nothing runs at the stop, so no later poll
// says the answer was lost: the unit stayed claimed, and its caller got a
// timeout at the deadline (5 minutes by default) for a unit that never
// ran. The stopping proxy now tells the automator (lost_from) before it
// exits, and the unit has failed by the time it has stopped.
func TestAUnitHandedToThePollAProxyStopsDuringFailsAtOnce(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{PollWindow: 30 * time.Second})
	caller := automatorv1.NewAutomatorServiceClient(a.CallerConn(t))
	c := &crossingClient{ProxyServiceClient: automatorv1.NewProxyServiceClient(a.ProxyConn(t)), waiting: make(chan struct{})}
	ag := agent.New(agent.Options{
		Client: c, Keys: crypto.Keys{a.Key}, InstanceID: "stopped", ScriptsDir: t.TempDir(),
		MaxConcurrency: 1, PollWait: 30 * time.Second, GracePeriod: 5 * time.Second,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan struct{})
	go func() { ag.Run(ctx); close(done) }()
	<-c.waiting

	stop() // SIGTERM, as the unit is queued
	st, err := caller.Submit(context.Background(), &automatorv1.ExecuteRequest{Account: "acme", Command: &automatorv1.Command{Script: "never.sh"}})
	if err != nil {
		t.Fatal(err)
	}
	<-done

	c.mu.Lock()
	dropped := c.dropped
	c.mu.Unlock()
	if len(dropped) != 1 || dropped[0] != st.GetWorkId() {
		t.Fatalf("the answer the stop crossed claimed %v; want the unit %s (the test did not cross them)", dropped, st.GetWorkId())
	}
	got, err := caller.Get(context.Background(), &automatorv1.GetRequest{WorkId: st.GetWorkId()})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetState() != automatorv1.State_STATE_FAILED || !strings.Contains(got.GetReason(), "never reached") {
		t.Fatalf("after the proxy stopped, the unit handed to its last poll is %v (%q); want failed, its claim never having reached the proxy, not left claimed to time out",
			got.GetState(), got.GetReason())
	}
}
