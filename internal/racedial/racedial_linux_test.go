package racedial

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/closedport"
)

// listening returns the address of a listener on loopback, and a channel
// of the connections it accepts.
func listening(t *testing.T) (string, <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 4)
	go func() {
		// Closed once the listener is, at the test's end (no t.Cleanup
		// from here: it may come after the test has ended).
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			select {
			case accepted <- c:
			default:
			}
		}
	}()
	return ln.Addr().String(), accepted
}

// dials records the dials Race makes: which began while which others were
// under way, and how each ended.
type dials struct {
	mu      sync.Mutex
	pending map[string]bool
	// beside[a] lists what was under way when a's dial began.
	beside map[string][]string
	ended  map[string]chan error
}

func newDials(addrs ...string) *dials {
	d := &dials{pending: map[string]bool{}, beside: map[string][]string{}, ended: map[string]chan error{}}
	for _, a := range addrs {
		d.ended[a] = make(chan error, 1)
	}
	return d
}

func (d *dials) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	for a := range d.pending {
		d.beside[addr] = append(d.beside[addr], a)
	}
	d.pending[addr] = true
	d.mu.Unlock()
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, addr)
	d.mu.Lock()
	delete(d.pending, addr)
	d.mu.Unlock()
	d.ended[addr] <- err
	return c, err
}

// TestANameWhoseFirstAddressIsBlackholedConnectsToTheNext: the next
// address is dialed while the first, black-holed, is still under way, and
// its connection is returned; the first's dial is then given up. Go's own
// dialer waited for the first's share of the time left (10 s of gRPC's
// 20 s) before it tried the second.
func TestANameWhoseFirstAddressIsBlackholedConnectsToTheNext(t *testing.T) {
	t.Parallel()
	hole := closedport.Blackholed(t)
	live, accepted := listening(t)
	d := newDials(hole, live)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Race(ctx, []string{hole, live}, 10*time.Millisecond, d.dial)
	if err != nil {
		t.Fatalf("Race: %v; want the connection to %s", err, live)
	}
	defer c.Close()
	if c.RemoteAddr().String() != live {
		t.Fatalf("connected to %s, want %s", c.RemoteAddr(), live)
	}
	d.mu.Lock()
	beside := d.beside[live]
	d.mu.Unlock()
	if len(beside) != 1 || beside[0] != hole {
		t.Errorf("the dial of %s began beside %v; want beside the black-holed %s's, under way", live, beside, hole)
	}
	<-accepted
	select {
	case err := <-d.ended[hole]:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the black-holed dial ended with %v; want it given up (context canceled) once the other won", err)
		}
	case <-ctx.Done():
		t.Fatal("the black-holed dial was not given up once the other won")
	}
}

// TestAnAddressThatFailsStartsTheNextAtOnce: a refused address does not
// hold the next one up for the stagger (an hour here: a test that waited
// for it would time out).
func TestAnAddressThatFailsStartsTheNextAtOnce(t *testing.T) {
	t.Parallel()
	live, _ := listening(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Race(ctx, []string{closedport.Addr(t), live}, time.Hour, (&net.Dialer{}).DialContext)
	if err != nil {
		t.Fatalf("Race: %v; want the connection to %s", err, live)
	}
	c.Close()
}

// TestWhenEveryAddressFailsTheFirstsErrorIsReturned, as Go's dialer
// returns it.
func TestWhenEveryAddressFailsTheFirstsErrorIsReturned(t *testing.T) {
	t.Parallel()
	first, second := closedport.Addr(t), closedport.Addr(t)
	_, err := Race(context.Background(), []string{first, second}, time.Hour, (&net.Dialer{}).DialContext)
	if err == nil || !strings.Contains(err.Error(), first) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("Race: %v; want %s's refusal", err, first)
	}
}

// TestAConnectionMadeAfterTheWinnerIsClosed: a dial that connects once
// another has won is closed, not left open.
func TestAConnectionMadeAfterTheWinnerIsClosed(t *testing.T) {
	t.Parallel()
	late, lateAccepted := listening(t)
	winner, _ := listening(t)
	won := make(chan struct{})
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if addr == late {
			<-won // connected, handed over only after the other won
		}
		return c, err
	}
	c, err := Race(context.Background(), []string{late, winner}, time.Millisecond, dial)
	close(won)
	if err != nil {
		t.Fatalf("Race: %v", err)
	}
	defer c.Close()
	if c.RemoteAddr().String() != winner {
		t.Fatalf("connected to %s, want %s", c.RemoteAddr(), winner)
	}
	s := <-lateAccepted
	_ = s.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := s.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("the late connection's read: %v; want EOF, it closed", err)
	}
}

// TestAHostNameIsLookedUpAndItsAddressesDialed: localhost's addresses
// (::1 first on many hosts, refused here) lead to the listener on
// 127.0.0.1. The lookups ask no DNS server: localhost is in the hosts
// file, and the resolver's own DNS connections fail.
func TestAHostNameIsLookedUpAndItsAddressesDialed(t *testing.T) {
	t.Parallel()
	live, _ := listening(t)
	_, port, _ := net.SplitHostPort(live)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := Dialer{Resolver: &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("no DNS server in this test")
	}}}
	c, err := d.DialContext(ctx, net.JoinHostPort("localhost", port))
	if err != nil {
		t.Fatalf("DialContext(localhost:%s): %v", port, err)
	}
	c.Close()
	if _, err := d.DialContext(ctx, "no-such-host.invalid:1"); err == nil || !strings.Contains(err.Error(), "no-such-host.invalid") {
		t.Fatalf("a name that does not resolve: %v; want the lookup's error, naming it", err)
	}
}
