package agent

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// thinUplink is a listener whose connections are read at rate bytes a
// second: what a proxy sends queues up on its way (in the sockets' buffers,
// within HTTP/2's flow-control windows), as it does in a thin link's
// modem or VPN concentrator. Once widened, it reads at once.
type thinUplink struct {
	net.Listener
	rate  int
	widen *atomic.Bool
}

func (l thinUplink) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return slowReads{Conn: c, rate: l.rate, widen: l.widen}, nil
}

type slowReads struct {
	net.Conn
	rate  int
	widen *atomic.Bool
}

func (c slowReads) Read(p []byte) (int, error) {
	if c.widen.Load() {
		return c.Conn.Read(p)
	}
	p = p[:min(len(p), c.rate/20)] // 50 ms of the link at a time
	n, err := c.Conn.Read(p)
	time.Sleep(time.Duration(n) * time.Second / time.Duration(c.rate))
	return n, err
}

// countedWrites is a connection that closes full once n bytes were
// written to it.
type countedWrites struct {
	net.Conn
	written *atomic.Int64
	n       int64
	full    func()
}

func (c countedWrites) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if c.written.Add(int64(n)) >= c.n {
		c.full()
	}
	return n, err
}

// reportWatch is an automator that answers an earlier run's report of lost
// polls, and this run's polls for no units, at once, holds this run's
// polls for units until they are dropped, and accepts results.
type reportWatch struct {
	automatorv1.UnimplementedProxyServiceServer
	earlier  string
	reported chan struct{} // one send per report (buffered)
	polled   chan struct{} // closed by this run's first poll
	once     sync.Once
}

func (w *reportWatch) Poll(ctx context.Context, in *automatorv1.PollRequest) (*automatorv1.PollResponse, error) {
	if in.GetRunId() == w.earlier {
		w.reported <- struct{}{}
		return &automatorv1.PollResponse{}, nil
	}
	if in.GetMaxUnits() == 0 {
		return &automatorv1.PollResponse{}, nil
	}
	w.once.Do(func() { close(w.polled) })
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

func (w *reportWatch) Complete(context.Context, *automatorv1.CompleteRequest) (*automatorv1.CompleteResponse, error) {
	return &automatorv1.CompleteResponse{}, nil
}

// TestAnEarlierRunsLostPollsAreReportedOverALinkBusyWithItsResults: a
// proxy started again reports the polls its previous run lost while it
// posts again, over the same thin uplink, the large result that run had
// kept in its spool. The report waits behind the result's bytes queued on
// the link (here 6.4 s, 1 MiB at 160 KiB/s): it is given a poll's bound,
// and is made once, instead of being cut off after a fixed 5 s, logged
// as "automator unreachable" and made again until the result was sent.
func TestAnEarlierRunsLostPollsAreReportedOverALinkBusyWithItsResults(t *testing.T) {
	// Not parallel: its link is paced (160 KiB/s), and beside the other
	// tests, on a loaded machine, the report once missed its 30 s wait.
	dir := filepath.Join(t.TempDir(), SpoolDirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var log lockedWriter
	log.b = &bytes.Buffer{}
	logger := slog.New(slog.NewTextHandler(&log, nil))
	s := newSpool(dir, logger)
	req := &automatorv1.CompleteRequest{
		WorkId: "w_large", ClaimId: "c", InstanceId: "a",
		Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: make([]byte, 4<<20),
	}
	if err := s.write(s.path("w_large"), "acme", time.Now().Add(time.Hour), req, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	const earlier = "r_earlier"
	if err := s.saveLost([]lostPolls{{Version: 1, InstanceID: "a", Run: earlier, From: 3, Seq: 4, StoppedAt: time.Now().UTC()}}); err != nil {
		t.Fatal(err)
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &reportWatch{earlier: earlier, reported: make(chan struct{}, 16), polled: make(chan struct{})}
	// The report is made once the result's post has filled the link
	// (1 MiB written: its stream's flow-control window), as when the
	// re-post began first.
	var widen atomic.Bool
	var written atomic.Int64
	full := make(chan struct{})
	var fullOnce sync.Once
	var d net.Dialer
	client := serveProxyService(t, w, thinUplink{Listener: lis, rate: 160 << 10, widen: &widen},
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(8<<20)),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return countedWrites{Conn: c, written: &written, n: 1 << 20, full: func() { fullOnce.Do(func() { close(full) }) }}, nil
		}),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if p, ok := req.(*automatorv1.PollRequest); ok && p.GetRunId() == earlier {
				select {
				case <-full:
				case <-ctx.Done():
					return status.FromContextError(ctx.Err()).Err()
				}
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}))
	a := New(Options{
		tune:   testTuning(t),
		Client: client, Keys: crypto.Keys{testKey}, InstanceID: "a", ScriptsDir: t.TempDir(), SpoolDir: dir,
		MaxConcurrency: 1, GracePeriod: time.Second, BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: logger,
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the agent's log:\n%s", log.String())
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	start := time.Now()
	waittest.Recv(t, w.reported, "the report of the earlier run's lost polls")
	t.Logf("the report reached the automator after %v", time.Since(start))
	// Not one attempt was cut off (the first after 5 s: logged, and
	// made again) by the time the first reached the automator.
	logged := log.String()
	widen.Store(true)
	waittest.Recv(t, w.polled, "the restarted proxy's first poll, after its report")
	cancel()
	waittest.Recv(t, done, "the agent to stop")

	if n := len(w.reported) + 1; n != 1 {
		t.Errorf("the earlier run's lost polls were reported %d times; want once", n)
	}
	for _, line := range strings.Split(logged, "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			t.Errorf("logged: %s", line)
		}
	}
}
