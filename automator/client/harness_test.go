package client_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/testparallel"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestMain runs up to six of this package's tests at once unless the
// command line says otherwise: they spend most of their time waiting on
// hung peers, keepalives and deadlines, not computing, and the default
// (GOMAXPROCS, two on the CI machines) left the package's slot in
// `make test` mostly idle (123 s of wall for 15 s of CPU).
func TestMain(m *testing.M) {
	testparallel.Default(6)
	goleak.VerifyTestMain(m)
}

// unreachables records what a client's OnUnreachable (tell) is told.
type unreachables struct {
	mu   sync.Mutex
	told []client.Unreachable
}

func (r *unreachables) tell(u client.Unreachable) {
	r.mu.Lock()
	r.told = append(r.told, u)
	r.mu.Unlock()
}

// tellAndEnd is tell, then end: what a test asserts was told, the call
// it was told of (its context's cancel) need not go on until it gives up.
func (r *unreachables) tellAndEnd(end context.CancelFunc) func(client.Unreachable) {
	return func(u client.Unreachable) {
		r.tell(u)
		end()
	}
}

// once returns what OnUnreachable was told, failing the test unless it was
// told exactly once; when ends the failure's "told N times" (" before the
// call ended", say).
func (r *unreachables) once(t *testing.T, when string) client.Unreachable {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.told) != 1 {
		t.Fatalf("OnUnreachable told %d times (%+v)%s; want once", len(r.told), r.told, when)
	}
	return r.told[0]
}

// newClient is a client of a's API for the given addresses (a's own when
// none), closed at the end of the test.
func newClient(t *testing.T, a *automatortest.Automator, addrs ...string) *client.Client {
	t.Helper()
	if len(addrs) == 0 {
		addrs = []string{a.URL()}
	}
	c, err := client.New(client.Config{Addresses: addrs, APIKey: a.APIKey, CAPEM: a.CAPEM, ServerName: "127.0.0.1", RetryFor: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// fakeProxy plays a proxy instance by hand through the real ProxyService,
// for tests that must control exactly when a unit is claimed and ends.
type fakeProxy struct {
	t   *testing.T
	a   *automatortest.Automator
	api automatorv1.ProxyServiceClient
}

func newFakeProxy(t *testing.T, a *automatortest.Automator) *fakeProxy {
	return &fakeProxy{t: t, a: a, api: automatorv1.NewProxyServiceClient(a.ProxyConn(t))}
}

// claim polls until it claims one unit.
func (p *fakeProxy) claim() *automatorv1.Claim {
	p.t.Helper()
	for range 20 {
		resp, err := p.api.Poll(context.Background(), &automatorv1.PollRequest{InstanceId: "fake", MaxUnits: 1})
		if err != nil {
			p.t.Fatalf("poll: %v", err)
		}
		if len(resp.GetClaims()) == 1 {
			return resp.GetClaims()[0]
		}
	}
	p.t.Fatal("no unit to claim after 20 polls")
	return nil
}

// complete posts a successful result for c.
func (p *fakeProxy) complete(c *automatorv1.Claim, stdout string) {
	p.t.Helper()
	if err := p.tryComplete(c, stdout); err != nil {
		p.t.Fatalf("complete: %v", err)
	}
}

// tryComplete is complete, returning the automator's refusal.
func (p *fakeProxy) tryComplete(c *automatorv1.Claim, stdout string) error {
	p.t.Helper()
	plain, err := proto.Marshal(&automatorv1.Result{
		ExitCode: 0, Stdout: []byte(stdout), InstanceId: "fake",
		StartedAt: timestamppb.Now(), FinishedAt: timestamppb.Now(),
	})
	if err != nil {
		p.t.Fatal(err)
	}
	sealed, err := crypto.Seal(p.a.Key, c.GetAccount(), c.GetWorkId(), crypto.DirResult, plain)
	if err != nil {
		p.t.Fatal(err)
	}
	_, err = p.api.Complete(context.Background(), &automatorv1.CompleteRequest{
		WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(), InstanceId: "fake",
		Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: sealed,
	})
	return err
}

// relay is a TCP relay between the client and the automator that a test
// can cut: every connection through it is closed at once, as when a
// network path drops.
type relay struct {
	lis    net.Listener
	target string

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
	hung   bool
	wg     sync.WaitGroup
}

func startRelay(t *testing.T, target string) *relay {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{lis: lis, target: target}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.close)
	return r
}

func (r *relay) url() string { return "https://" + r.lis.Addr().String() }

func (r *relay) accept() {
	defer r.wg.Done()
	for {
		in, err := r.lis.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		target := r.target
		r.mu.Unlock()
		out, err := net.Dial("tcp", target)
		if err != nil {
			in.Close()
			continue
		}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			in.Close()
			out.Close()
			return
		}
		r.conns = append(r.conns, in, out)
		r.wg.Add(2)
		r.mu.Unlock()
		go r.pipe(in, out)
		go r.pipe(out, in)
	}
}

func (r *relay) pipe(dst, src net.Conn) {
	defer r.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !r.isHung() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// hang makes the automator behind the relay look hung, as when its
// process is stopped (SIGSTOP) or its machine frozen: connections open
// and stay open, but nothing sent either way arrives, and nothing is
// reset.
func (r *relay) hang() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hung = true
}

func (r *relay) isHung() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hung
}

// retarget relays the connections accepted from now on to target.
func (r *relay) retarget(target string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.target = target
}

// cut closes every connection through the relay; new ones are accepted.
func (r *relay) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		c.Close()
	}
	r.conns = nil
}

// close cuts and stops accepting: the address is now down.
func (r *relay) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.lis.Close()
	r.cut()
	r.wg.Wait()
}
