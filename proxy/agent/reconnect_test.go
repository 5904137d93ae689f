package agent

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/closedport"
	"github.com/opsgate/opsgate/internal/grpcwire"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// gate is a listener for a gRPC server that resets every connection while
// the automator is to look down (as a host does whose port nothing listens
// on), and hands them to the server once up.
type gate struct {
	net.Listener
	up atomic.Bool

	mu    sync.Mutex
	conns []net.Conn // accepted, for resetAll
}

func (g *gate) Accept() (net.Conn, error) {
	for {
		c, err := g.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !g.up.Load() {
			closedport.Reset(c)
			c.Close()
			continue
		}
		g.mu.Lock()
		g.conns = append(g.conns, c)
		g.mu.Unlock()
		return c, nil
	}
}

// resetAll resets every connection accepted so far.
func (g *gate) resetAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.conns {
		closedport.Reset(c)
		c.Close()
	}
	g.conns = nil
}

// heldPolls is an automator that tells each poll for units's arrival on
// polled and then leaves it waiting (a long poll with no work); it answers
// the others (a stopping proxy's) at once.
type heldPolls struct {
	automatorv1.UnimplementedProxyServiceServer
	polled chan struct{}
}

func (s heldPolls) Poll(ctx context.Context, in *automatorv1.PollRequest) (*automatorv1.PollResponse, error) {
	if in.GetMaxUnits() == 0 {
		return &automatorv1.PollResponse{}, nil
	}
	select {
	case s.polled <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

// gatedAutomator serves srv through a gate, down at first, and returns
// the gate and a connection to it set up as the proxy's is for its polls
// (grpcwire.WatchAnswers), reconnecting as the proxy's does
// (cli.Reconnect), its backoff shorter.
func gatedAutomator(t *testing.T, srv automatorv1.ProxyServiceServer) (*gate, *grpc.ClientConn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{Listener: lis}
	gs := grpc.NewServer(grpcwire.ServerOptions()...)
	automatorv1.RegisterProxyServiceServer(gs, srv)
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(g) }()
	opts := append(grpcwire.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: grpcbackoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
			// As the proxy's: left out, a connection had its backoff's
			// 50 ms to be set up, and on a loaded machine was not (a
			// dial's i/o timeout failed the first call).
			MinConnectTimeout: grpcwire.SetupWithin,
		}))
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), append(opts, grpcwire.WatchAnswers()...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); gs.Stop(); <-served })
	return g, conn
}

// TestAProxyPollsAsSoonAsTheAutomatorIsBack: a proxy whose polls failed
// while the automator could not be reached polls again as soon as its
// connection is set up again, not when its backoff (an hour here; up to
// 15 s in production) ends: before, units queued at an automator back from
// a restart or a partition waited that long.
func TestAProxyPollsAsSoonAsTheAutomatorIsBack(t *testing.T) {
	t.Parallel()
	srv := heldPolls{polled: make(chan struct{}, 1)}
	g, conn := gatedAutomator(t, srv)
	log := &signalingWriter{lockedWriter: lockedWriter{b: &bytes.Buffer{}}, says: "automator unreachable", said: make(chan struct{})}
	a := New(Options{
		tune:   tuning{reconnectedPollAfter: time.Millisecond},
		Client: automatorv1.NewProxyServiceClient(conn), Conn: conn,
		Keys: crypto.Keys{testKey}, InstanceID: "back", ScriptsDir: t.TempDir(),
		MaxConcurrency: 1, PollWait: time.Minute, GracePeriod: time.Second,
		BackoffMin: time.Hour, BackoffMax: time.Hour,
		Logger: slog.New(slog.NewTextHandler(log, nil)),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	defer func() { cancel(); waittest.Recv(t, done, "the agent to stop") }()
	waittest.Recv(t, log.said, "a poll to fail, the automator unreachable")
	g.up.Store(true)
	waittest.Recv(t, srv.polled, "a poll once the automator is back (not after the hour's backoff)")
}

// TestABackoffOnAConnectionThatIsSetUpLastsAllOfIt: a failed poll's
// backoff ends early only for a connection that could not be set up and
// then was. A poll the automator failed on a connection that stays up,
// and one on a link that fails each connection once it is set up, wait
// all of it: else the proxy would poll in a loop.
func TestABackoffOnAConnectionThatIsSetUpLastsAllOfIt(t *testing.T) {
	t.Parallel()
	for _, closing := range []bool{false, true} {
		g, conn := gatedAutomator(t, heldPolls{polled: make(chan struct{}, 1)})
		g.up.Store(true)
		// The connection is set up first, as after a poll.
		if _, err := automatorv1.NewProxyServiceClient(conn).Complete(t.Context(), &automatorv1.CompleteRequest{}); status.Code(err) != codes.Unimplemented {
			t.Fatalf("a first call to set the connection up: %v, want Unimplemented", err)
		}
		if closing {
			// From now on each connection is reset once the proxy's side
			// has it set up, this one now. Not a fixed while after its
			// accept: on a loaded machine that came before the handshake
			// ended, a connection that could not be set up, which may
			// end the backoff (twice in CI).
			watch, stop := context.WithCancel(t.Context())
			defer stop()
			go func() {
				for s := conn.GetState(); ; s = conn.GetState() {
					if s == connectivity.Ready {
						g.resetAll()
					}
					if !conn.WaitForStateChange(watch, s) {
						return
					}
				}
			}()
			// Down once: the backoff begins as after a poll that failed
			// with its connection.
			for s := conn.GetState(); s == connectivity.Ready; s = conn.GetState() {
				conn.WaitForStateChange(t.Context(), s)
			}
		}
		a := New(Options{Conn: conn, tune: tuning{reconnectedPollAfter: time.Millisecond}})
		const d = 400 * time.Millisecond
		begun := time.Now()
		if !a.backOff(t.Context(), d) {
			t.Fatal("backOff reported its context ended; it did not")
		}
		if took := time.Since(begun); took < d {
			t.Errorf("closing each connection %v: the backoff of %v ended after %v, on a connection that was set up", closing, d, took)
		}
	}
}
