package agent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
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
// claims are kept in dropped. With cutFor set, the connection then
// drops: that many later calls fail as unreachable (below 0: every one).
type crossingClient struct {
	automatorv1.ProxyServiceClient
	waiting chan struct{} // closed when the first such poll is sent
	once    sync.Once
	cutFor  int32
	cutting atomic.Bool  // the answer crossed the cancel
	cut     atomic.Int32 // calls left to fail, with cutFor above 0

	mu      sync.Mutex
	dropped []string
}

func (c *crossingClient) Poll(ctx context.Context, in *automatorv1.PollRequest, opts ...grpc.CallOption) (*automatorv1.PollResponse, error) {
	if c.cutting.Load() && (c.cutFor < 0 || c.cut.Add(-1) >= 0) {
		return nil, status.Error(codes.Unavailable, "connection cut by the test")
	}
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
		c.cut.Store(c.cutFor)
		c.cutting.Store(c.cutFor != 0)
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
	t.Parallel()
	stopAsTheAnswerCrosses(t, 0)
}

// TestAUnitHandedToThePollAProxyStopsDuringFailsWhenTheConnectionComesBack:
// as TestAUnitHandedToThePollAProxyStopsDuringFailsAtOnce, but the
// connection drops as the proxy stops, and its first try to say so fails
// at once; it comes back at once, and the stopping proxy, with no spool,
// tries again within its bound rather than leave the unit to time out.
func TestAUnitHandedToThePollAProxyStopsDuringFailsWhenTheConnectionComesBack(t *testing.T) {
	t.Parallel()
	stopAsTheAnswerCrosses(t, 1)
}

// stopAsTheAnswerCrosses stops an agent with no spool as a unit is handed
// to its waiting poll, the answer crossing the stop, the connection then
// failing cutFor calls, and checks that the unit has failed once the agent
// has stopped.
func stopAsTheAnswerCrosses(t *testing.T, cutFor int32) {
	a := automatortest.Start(t, automatortest.Options{PollWindow: 30 * time.Second})
	caller := automatorv1.NewAutomatorServiceClient(a.CallerConn(t))
	c := &crossingClient{ProxyServiceClient: automatorv1.NewProxyServiceClient(a.ProxyConn(t)), waiting: make(chan struct{}), cutFor: cutFor}
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

// TestAUnitHandedToThePollOfAProxyStoppedOffTheNetworkFailsWhenItStarts:
// as TestAUnitHandedToThePollAProxyStopsDuringFailsAtOnce, but the
// connection drops as the proxy stops, so it cannot say before it exits
// that it never read its last poll's answer. A restart is a new process (a
// new run), which knew nothing of the old one's polls: the unit stayed
// claimed until its deadline. The stopping proxy now keeps the lost polls
// in its spool, and the next start of the instance reports them, as the
// old run, before it polls: the unit has failed by its first poll.
func TestAUnitHandedToThePollOfAProxyStoppedOffTheNetworkFailsWhenItStarts(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{PollWindow: 30 * time.Second})
	caller := automatorv1.NewAutomatorServiceClient(a.CallerConn(t))
	proxyClient := automatorv1.NewProxyServiceClient(a.ProxyConn(t))
	c := &crossingClient{ProxyServiceClient: proxyClient, waiting: make(chan struct{}), cutFor: -1}
	spool := filepath.Join(t.TempDir(), agent.SpoolDirName)
	options := func(client agent.Client) agent.Options {
		return agent.Options{
			Client: client, Keys: crypto.Keys{a.Key}, InstanceID: "restarted", ScriptsDir: t.TempDir(),
			MaxConcurrency: 1, PollWait: 30 * time.Second, GracePeriod: 5 * time.Second,
			BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond, SpoolDir: spool,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { agent.New(options(c)).Run(ctx); close(done) }()
	<-c.waiting
	stop()
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
	state := func() *automatorv1.WorkStatus {
		got, err := caller.Get(context.Background(), &automatorv1.GetRequest{WorkId: st.GetWorkId()})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := state(); got.GetState() != automatorv1.State_STATE_CLAIMED {
		t.Fatalf("with the connection cut, the unit is %v (%q) once the proxy stopped; want it still claimed", got.GetState(), got.GetReason())
	}

	// Started again, the network back.
	ctx2, stop2 := context.WithCancel(context.Background())
	defer stop2()
	again := agent.New(options(proxyClient))
	done2 := make(chan struct{})
	go func() { again.Run(ctx2); close(done2) }()
	defer func() { stop2(); <-done2 }()
	automatortest.WaitFor(t, 10*time.Second, "the restarted proxy to poll", func() bool { return !again.LastPoll().IsZero() })
	if got := state(); got.GetState() != automatorv1.State_STATE_FAILED || !strings.Contains(got.GetReason(), "never reached") {
		t.Fatalf("once the restarted proxy polled, the unit handed to the stopped one's last poll is %v (%q); want failed, its claim never having reached the proxy, not left claimed to time out",
			got.GetState(), got.GetReason())
	}
}

// TestAStopRefusedWhileReportingItsLostPollsDoesNotTryAgain: the stopping
// proxy tries again to report its lost polls only when the automator could
// not be reached; one that refuses it (its token revoked, say) would refuse
// every try, which would only hold the stop up. Its log line says the
// report was refused, and why, not that the automator was unreachable.
func TestAStopRefusedWhileReportingItsLostPollsDoesNotTryAgain(t *testing.T) {
	t.Parallel()
	var refuse atomic.Bool
	var logged bytes.Buffer // written by one handler, read once the agent stopped
	var mu sync.Mutex
	refused := make(chan struct{}, 1)
	reports := 0
	a := automatortest.Start(t, automatortest.Options{Interceptors: []grpc.UnaryServerInterceptor{
		func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			p, ok := req.(*automatorv1.PollRequest)
			if !ok || !refuse.Load() {
				return handler(ctx, req)
			}
			mu.Lock()
			if p.GetMaxUnits() == 0 && p.GetLostFrom() != 0 {
				reports++ // only the stop polls for no units: nothing runs
			}
			mu.Unlock()
			select {
			case refused <- struct{}{}:
			default:
			}
			return nil, status.Error(codes.PermissionDenied, "refused by the test")
		},
	}})
	ag := agent.New(agent.Options{
		Client: automatorv1.NewProxyServiceClient(a.ProxyConn(t)), Keys: crypto.Keys{a.Key}, InstanceID: "refused", ScriptsDir: t.TempDir(),
		MaxConcurrency: 1, PollWait: time.Second, GracePeriod: 5 * time.Second,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logged, nil)),
	})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan struct{})
	go func() { ag.Run(ctx); close(done) }()
	automatortest.WaitFor(t, 10*time.Second, "the proxy to poll", func() bool { return !ag.LastPoll().IsZero() })
	refuse.Store(true)
	<-refused // a poll for units failed: its answer counts as lost
	stop()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if reports != 1 {
		t.Fatalf("the stopping proxy reported its lost polls %d times to an automator that refused it; want once", reports)
	}
	var line string
	for _, l := range strings.Split(logged.String(), "\n") {
		if strings.Contains(l, "stopped without telling the automator") {
			line = l
		}
	}
	if !strings.Contains(line, "code=PermissionDenied") || !strings.Contains(line, "refused by the test") || strings.Contains(line, "could not be reached") {
		t.Errorf("the stop's log line: %q; want it to give the refusal (PermissionDenied, its message), not to say the automator could not be reached", line)
	}
	// "stopped" is the run's last word, after what the stop could not tell.
	if lines := strings.Split(strings.TrimSpace(logged.String()), "\n"); !strings.Contains(lines[len(lines)-1], "msg=stopped") {
		t.Errorf("the run's last log line is %q; want \"stopped\", after the line about lost polls", lines[len(lines)-1])
	}
}

// TestOldRecordsOfLostPollsAreDroppedFromTheSpool: a record of lost polls
// is of use only until the units claimed for them have ended, 24 hours at
// most after their stop (the longest timeout). One of an instance id that
// never polls again (a host renamed, a container's host name) was kept
// for it forever, and with it the spool; records past twice that are
// dropped at the next start, of whichever instance, while a recent one of
// another instance is still left for it.
func TestOldRecordsOfLostPollsAreDroppedFromTheSpool(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	spool := filepath.Join(t.TempDir(), agent.SpoolDirName)
	if err := os.MkdirAll(spool, 0o700); err != nil {
		t.Fatal(err)
	}
	record := func(instance string, stopped time.Time) string {
		return fmt.Sprintf(`{"version":1,"instance_id":%q,"run_id":"OLDRUN%s","lost_from":3,"poll_seq":5,"stopped_at":%q}`,
			instance, instance, stopped.UTC().Format(time.RFC3339Nano))
	}
	path := filepath.Join(spool, agent.LostPollsName)
	write := func(records ...string) {
		t.Helper()
		if err := os.WriteFile(path, []byte("["+strings.Join(records, ",")+"]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	start := func() {
		t.Helper()
		ag := agent.New(agent.Options{
			Client: automatorv1.NewProxyServiceClient(a.ProxyConn(t)), Keys: crypto.Keys{a.Key}, InstanceID: "new-name", ScriptsDir: t.TempDir(),
			PollWait: time.Second, SpoolDir: spool, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		})
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { ag.Run(ctx); close(done) }()
		automatortest.WaitFor(t, 10*time.Second, "the proxy to poll", func() bool { return !ag.LastPoll().IsZero() })
		stop()
		<-done
	}

	// Three days old: of an instance gone for good, and of this one.
	write(record("old-name", time.Now().Add(-72*time.Hour)), record("new-name", time.Now().Add(-72*time.Hour)))
	start()
	if _, err := os.Stat(spool); !errors.Is(err, fs.ErrNotExist) {
		data, _ := os.ReadFile(path)
		t.Fatalf("after a start, the spool holding only records of lost polls three days old: %v (%s); want it removed", err, data)
	}

	// An hour old, of another instance: still left for it.
	if err := os.MkdirAll(spool, 0o700); err != nil {
		t.Fatal(err)
	}
	write(record("other-name", time.Now().Add(-time.Hour)))
	start()
	if data, err := os.ReadFile(path); err != nil || !strings.Contains(string(data), `"other-name"`) {
		t.Fatalf("after a start, the record of another instance's lost polls an hour old: %q, %v; want it kept", data, err)
	}
}
