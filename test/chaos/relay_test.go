package chaos

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// fakeProxyService answers Poll with the claims queued in claims (or an
// empty response) and counts Completes.
type fakeProxyService struct {
	automatorv1.UnimplementedProxyServiceServer
	mu        sync.Mutex
	claims    []*automatorv1.Claim
	completes []string
}

func (f *fakeProxyService) Poll(context.Context, *automatorv1.PollRequest) (*automatorv1.PollResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &automatorv1.PollResponse{Claims: f.claims}
	f.claims = nil
	return resp, nil
}

func (f *fakeProxyService) Complete(_ context.Context, in *automatorv1.CompleteRequest) (*automatorv1.CompleteResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.completes = append(f.completes, in.GetWorkId())
	return &automatorv1.CompleteResponse{}, nil
}

func (f *fakeProxyService) CompleteBatch(_ context.Context, in *automatorv1.CompleteBatchRequest) (*automatorv1.CompleteBatchResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &automatorv1.CompleteBatchResponse{}
	for _, r := range in.GetResults() {
		f.completes = append(f.completes, r.GetWorkId())
		resp.Outcomes = append(resp.Outcomes, &automatorv1.CompleteOutcome{})
	}
	return resp, nil
}

func (f *fakeProxyService) completed() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.completes...)
}

// grpcThroughRelay serves f on loopback (cleartext) behind an h2c relay and
// returns the relay, a client through it and the relay's cuts.
func grpcThroughRelay(t *testing.T, f *fakeProxyService) (*Relay, automatorv1.ProxyServiceClient, <-chan Cut) {
	r, conn, cuts := serveThroughRelay(t, func(gs *grpc.Server) { automatorv1.RegisterProxyServiceServer(gs, f) })
	return r, automatorv1.NewProxyServiceClient(conn), cuts
}

// serveThroughRelay serves what register registers on loopback (cleartext)
// behind an h2c relay and returns the relay, a connection through it and
// the relay's cuts.
func serveThroughRelay(t *testing.T, register func(*grpc.Server)) (*Relay, *grpc.ClientConn, <-chan Cut) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	register(gs)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	cuts := make(chan Cut, 4)
	r, err := NewRelay(ln.Addr().String(), true, func(c Cut) { cuts <- c })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	conn, err := grpc.NewClient("passthrough:///"+r.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return r, conn, cuts
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestRelayCutsAPollResponseThatCarriesClaims: an armed cut lets empty
// Poll responses through and cuts the first one with claims, naming them.
func TestRelayCutsAPollResponseThatCarriesClaims(t *testing.T) {
	f := &fakeProxyService{}
	r, c, cuts := grpcThroughRelay(t, f)
	r.Arm(CutPollResponse)
	if _, err := c.Poll(ctxT(t), &automatorv1.PollRequest{InstanceId: "a"}); err != nil {
		t.Fatalf("an empty poll through an armed relay: %v", err)
	}
	f.mu.Lock()
	f.claims = []*automatorv1.Claim{{WorkId: "w1", ClaimId: "c1", SealedCommand: make([]byte, 200)}, {WorkId: "w2"}}
	f.mu.Unlock()
	_, err := c.Poll(ctxT(t), &automatorv1.PollRequest{InstanceId: "a"})
	if status.Code(err) != codes.Unavailable && status.Code(err) != codes.Internal {
		t.Fatalf("a poll whose response was cut returned %v, want Unavailable", err)
	}
	cut := waittest.Recv(t, cuts, "the relay to report the poll response it cut")
	if cut.Kind != CutPollResponse || strings.Join(cut.WorkIDs, ",") != "w1,w2" {
		t.Fatalf("cut %+v, want the poll response of w1 and w2", cut)
	}
	if r.Disarm(CutPollResponse) {
		t.Fatal("the cut is still armed after it was made")
	}
	// The proxy reconnects through the relay and carries on.
	if _, err := c.Poll(ctxT(t), &automatorv1.PollRequest{InstanceId: "a"}); err != nil {
		t.Fatalf("a poll after the cut: %v", err)
	}
}

// TestRelayCutsACompleteRequestBeforeTheServerSeesIt.
func TestRelayCutsACompleteRequestBeforeTheServerSeesIt(t *testing.T) {
	f := &fakeProxyService{}
	r, c, cuts := grpcThroughRelay(t, f)
	if _, err := c.Poll(ctxT(t), &automatorv1.PollRequest{InstanceId: "a"}); err != nil {
		t.Fatal(err)
	}
	r.Arm(CutCompleteRequest)
	if _, err := c.Complete(ctxT(t), &automatorv1.CompleteRequest{WorkId: "w1", SealedResult: make([]byte, 100)}); err == nil {
		t.Fatal("a Complete whose request was cut succeeded")
	}
	if cut := waittest.Recv(t, cuts, "the relay to report the Complete request it cut"); cut.Kind != CutCompleteRequest || strings.Join(cut.WorkIDs, ",") != "w1" {
		t.Fatalf("cut %+v, want the Complete of w1", cut)
	}
	if got := f.completed(); len(got) != 0 {
		t.Fatalf("the server received %v, want nothing", got)
	}
	if _, err := c.Complete(ctxT(t), &automatorv1.CompleteRequest{WorkId: "w1"}); err != nil {
		t.Fatalf("posting again: %v", err)
	}
}

// TestRelayCutsACompleteResponseAfterTheServerHandledIt.
func TestRelayCutsACompleteResponseAfterTheServerHandledIt(t *testing.T) {
	f := &fakeProxyService{}
	r, c, cuts := grpcThroughRelay(t, f)
	r.Arm(CutCompleteResponse)
	if _, err := c.Complete(ctxT(t), &automatorv1.CompleteRequest{WorkId: "w1"}); err == nil {
		t.Fatal("a Complete whose response was cut succeeded")
	}
	if cut := waittest.Recv(t, cuts, "the relay to report the Complete response it cut"); cut.Kind != CutCompleteResponse || strings.Join(cut.WorkIDs, ",") != "w1" {
		t.Fatalf("cut %+v, want the Complete of w1", cut)
	}
	if got := f.completed(); len(got) != 1 || got[0] != "w1" {
		t.Fatalf("the server received %v, want [w1]", got)
	}
}

// batchOf is a CompleteBatch request posting the results of ids, each
// with a sealed result of size bytes.
func batchOf(size int, ids ...string) *automatorv1.CompleteBatchRequest {
	req := &automatorv1.CompleteBatchRequest{}
	for _, id := range ids {
		req.Results = append(req.Results, &automatorv1.CompleteRequest{WorkId: id, SealedResult: make([]byte, size)})
	}
	return req
}

// TestRelayCutsACompleteBatchRequestNamingEveryUnit: a batch of results
// spanning several DATA frames (HTTP/2's 16 KiB) is cut in its last
// frame, naming every unit it posts, and the server sees none of them.
func TestRelayCutsACompleteBatchRequestNamingEveryUnit(t *testing.T) {
	f := &fakeProxyService{}
	r, c, cuts := grpcThroughRelay(t, f)
	if _, err := c.Poll(ctxT(t), &automatorv1.PollRequest{InstanceId: "a"}); err != nil {
		t.Fatal(err)
	}
	r.Arm(CutCompleteRequest)
	if _, err := c.CompleteBatch(ctxT(t), batchOf(20<<10, "w1", "w2", "w3")); err == nil {
		t.Fatal("a CompleteBatch whose request was cut succeeded")
	}
	if cut := waittest.Recv(t, cuts, "the relay to report the CompleteBatch request it cut"); cut.Kind != CutCompleteRequest || strings.Join(cut.WorkIDs, ",") != "w1,w2,w3" {
		t.Fatalf("cut %+v, want the CompleteBatch of w1, w2 and w3", cut)
	}
	if got := f.completed(); len(got) != 0 {
		t.Fatalf("the server received %v, want nothing", got)
	}
}

// TestRelayCutsACompleteBatchResponseNamingEveryUnit.
func TestRelayCutsACompleteBatchResponseNamingEveryUnit(t *testing.T) {
	f := &fakeProxyService{}
	r, c, cuts := grpcThroughRelay(t, f)
	r.Arm(CutCompleteResponse)
	if _, err := c.CompleteBatch(ctxT(t), batchOf(100, "w1", "w2")); err == nil {
		t.Fatal("a CompleteBatch whose response was cut succeeded")
	}
	if cut := waittest.Recv(t, cuts, "the relay to report the CompleteBatch response it cut"); cut.Kind != CutCompleteResponse || strings.Join(cut.WorkIDs, ",") != "w1,w2" {
		t.Fatalf("cut %+v, want the CompleteBatch of w1 and w2", cut)
	}
	if got := f.completed(); strings.Join(got, ",") != "w1,w2" {
		t.Fatalf("the server received %v, want [w1 w2]", got)
	}
}

// echoServer echoes lines back.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// roundTrip writes a line and reads it back within d.
func roundTrip(c net.Conn, line string, d time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := fmt.Fprintln(c, line); err != nil {
		return err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if got != line+"\n" {
		return fmt.Errorf("echoed %q, want %q", got, line)
	}
	return nil
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRelayBlackholesAndResets: a partition is silent (no data, no reset)
// until it heals, when stalled connections are reset and new ones flow;
// StallExisting silences open connections only; DropAll resets them.
func TestRelayBlackholesAndResets(t *testing.T) {
	r, err := NewRelay(echoServer(t), false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := dial(t, r.Addr())
	if err := roundTrip(c, "one", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	r.Partition(true)
	if err := roundTrip(c, "two", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("during a partition: %v, want silence (a timeout)", err)
	}
	during := dial(t, r.Addr())
	if err := roundTrip(during, "three", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("a new connection during a partition: %v, want silence", err)
	}
	r.Partition(false)
	if err := roundTrip(c, "four", 5*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("a stalled connection after the partition: %v, want a reset", err)
	}
	c = dial(t, r.Addr())
	if err := roundTrip(c, "five", 5*time.Second); err != nil {
		t.Fatalf("a new connection after the partition: %v", err)
	}

	if n, _ := r.StallExisting(); n != 1 {
		t.Fatalf("stalled %d connections, want 1", n)
	}
	if err := roundTrip(c, "six", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("a stalled connection: %v, want silence", err)
	}
	fresh := dial(t, r.Addr())
	if err := roundTrip(fresh, "seven", 5*time.Second); err != nil {
		t.Fatalf("a new connection beside a stalled one: %v", err)
	}
	r.DropAll()
	if err := roundTrip(fresh, "eight", 5*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("after DropAll: %v, want a reset", err)
	}

	r.SetLatency(200 * time.Millisecond)
	c = dial(t, r.Addr())
	start := time.Now()
	if err := roundTrip(c, "nine", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 400*time.Millisecond {
		t.Fatalf("a round trip with 200ms latency each way took %v", d)
	}
	r.SetLatency(0)

	r.Down()
	if c, err := net.Dial("tcp", r.Addr()); err == nil {
		c.Close()
		t.Fatal("a relay that is down accepted a connection")
	}
	if err := r.Up(); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(dial(t, r.Addr()), "ten", 5*time.Second); err != nil {
		t.Fatalf("after Up: %v", err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestConnectProxyTunnelsOnlyToItsRoutes: CONNECT to a routed name opens a
// tunnel; anything else is refused; Kill resets tunnels and refuses
// connections until Start.
func TestConnectProxyTunnelsOnlyToItsRoutes(t *testing.T) {
	p, err := NewConnectProxy(map[string]string{"automator.test:443": echoServer(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tunnel := func(host string) (net.Conn, string) {
		c := dial(t, p.Addr())
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", host, host)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		// Byte by byte up to the blank line, so nothing of the tunnel is read.
		var head []byte
		one := make([]byte, 1)
		for !strings.HasSuffix(string(head), "\r\n\r\n") {
			if _, err := c.Read(one); err != nil {
				break
			}
			head = append(head, one[0])
		}
		line, _, _ := strings.Cut(string(head), "\r\n")
		return c, line
	}
	c, resp := tunnel("automator.test:443")
	if resp != "HTTP/1.1 200 Connection established" {
		t.Fatalf("CONNECT answered %q", resp)
	}
	if err := roundTrip(c, "hello", 5*time.Second); err != nil {
		t.Fatalf("through the tunnel: %v", err)
	}
	if p.Connects("automator.test:443") != 1 {
		t.Fatalf("connects = %d, want 1", p.Connects("automator.test:443"))
	}
	if _, resp := tunnel("elsewhere.test:443"); !strings.HasPrefix(resp, "HTTP/1.1 403") {
		t.Fatalf("CONNECT to an unknown host answered %q, want 403", resp)
	}

	p.Kill()
	if err := roundTrip(c, "again", 5*time.Second); err == nil {
		t.Fatal("a tunnel survived Kill")
	}
	if c, err := net.Dial("tcp", p.Addr()); err == nil {
		c.Close()
		t.Fatal("a killed CONNECT proxy accepted a connection")
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if _, resp := tunnel("automator.test:443"); resp != "HTTP/1.1 200 Connection established" {
		t.Fatalf("after Start, CONNECT answered %q", resp)
	}
}

// relayedConn connects a client through a new relay to a listener of its
// own: the relay, the client's end and the server's end, all closed when
// the test ends.
func relayedConn(t *testing.T) (r *Relay, client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	r, err = NewRelay(ln.Addr().String(), false, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	client = dial(t, r.Addr())
	server = waittest.Recv(t, accepted, "the relay to connect to the server")
	t.Cleanup(func() { server.Close() })
	return r, client, server
}

// TestStalledConnectionsCloseIsNotPassedOn: when one end gives up on a
// stalled connection, the other end hears nothing of it (a middlebox that
// forgot the connection drops the close as it drops data), until the
// partition heals and the relay resets it.
func TestStalledConnectionsCloseIsNotPassedOn(t *testing.T) {
	r, c, server := relayedConn(t)
	// Once a byte has gone through, the relay holds the connection.
	buf := make([]byte, 1)
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(server, buf); err != nil {
		t.Fatal(err)
	}
	if n, _ := r.StallExisting(); n != 1 {
		t.Fatalf("stalled %d connections, want 1", n)
	}
	c.Close()
	_ = server.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := server.Read(buf); !isTimeout(err) {
		t.Fatalf("the server's end after the client closed a stalled connection: %v, want silence (a timeout)", err)
	}
	r.Partition(true)
	r.Partition(false)
	_ = server.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := server.Read(buf); err == nil || isTimeout(err) {
		t.Fatalf("the server's end once the partition healed: %v, want a reset", err)
	}
}

// TestStallExistingSaysWhenTheClientLastHeardBytes: StallExisting returns
// when the relay last let bytes through to the client of a connection it
// stalls (where the client's keepalive starts counting), not when the
// client last sent, nor the stall; bytes dropped after it change nothing.
func TestStallExistingSaysWhenTheClientLastHeardBytes(t *testing.T) {
	r, c, server := relayedConn(t)
	buf := make([]byte, 1)
	if _, err := c.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(server, buf); err != nil {
		t.Fatal(err)
	}
	answered := time.Now() // the client's last bytes have passed
	if _, err := server.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	read := time.Now()

	n, heard := r.StallExisting()
	if n != 1 {
		t.Fatalf("stalled %d connections, want 1", n)
	}
	if heard.Before(answered) || heard.After(read) {
		const at = "15:04:05.000000"
		t.Fatalf("StallExisting says the client last heard bytes at %s, want when the server's answer passed (between %s and %s)", heard.Format(at), answered.Format(at), read.Format(at))
	}
	if _, err := server.Write([]byte("b")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := c.Read(buf); !isTimeout(err) {
		t.Fatalf("a stalled connection's client read %v, want silence (a timeout)", err)
	}
	if _, again := r.StallExisting(); !again.Equal(heard) {
		t.Fatalf("with the server's next bytes dropped, StallExisting says the client last heard bytes at %s, want %s", again.Format("15:04:05.000000"), heard.Format("15:04:05.000000"))
	}
}
