package grpcwire

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"
)

// attempts is a dial whose attempts wait until their context ends, except
// the one numbered connects (from 1; 0: none), which connects at once; and
// refused, which fails at once as refused.
type attempts struct {
	connects, refused int

	mu           sync.Mutex
	n, now, most int // attempts, running, most not given up at once
	ctxs         []context.Context
	ended        chan int // each attempt's number as it ends
	conns        []net.Conn
}

func (a *attempts) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	a.mu.Lock()
	a.n++
	n := a.n
	a.now++
	a.ctxs = append(a.ctxs, ctx)
	live := 0
	for _, c := range a.ctxs {
		if c.Err() == nil {
			live++
		}
	}
	a.most = max(a.most, live)
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.now--
		a.mu.Unlock()
		a.ended <- n
	}()
	switch n {
	case a.connects:
		c, s := net.Pipe()
		a.mu.Lock()
		a.conns = append(a.conns, s)
		a.mu.Unlock()
		return c, nil
	case a.refused:
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	<-ctx.Done()
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: ctx.Err()}
}

// TestRedialTakesTheFirstAttemptThatConnects: while attempts go
// unanswered, another begins each interval; the first that connects is
// the dial's, and every other is given up.
func TestRedialTakesTheFirstAttemptThatConnects(t *testing.T) {
	t.Parallel()
	a := &attempts{connects: 3, ended: make(chan int, 16)}
	c, err := redial(t.Context(), "addr", 5*time.Millisecond, 8, a.dial)
	if err != nil {
		t.Fatalf("redial: %v, want the third attempt's connection", err)
	}
	defer c.Close()
	ended := map[int]bool{}
	for len(ended) < 3 {
		select {
		case n := <-a.ended:
			ended[n] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("attempts ended: %v; want 1, 2 and 3 (the first two given up once the third connected)", ended)
		}
	}
	if a.n != 3 {
		t.Errorf("%d attempts; want 3: none after the one that connected", a.n)
	}
}

// TestRedialSaysARefusalAtOnce: an attempt that fails (refused) ends the
// dial with its error, as gRPC's dialer does: no other attempt waits for
// the interval.
func TestRedialSaysARefusalAtOnce(t *testing.T) {
	t.Parallel()
	a := &attempts{refused: 1, ended: make(chan int, 16)}
	_, err := redial(t.Context(), "addr", time.Hour, 8, a.dial)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("redial: %v, want the refusal", err)
	}
	if a.n != 1 {
		t.Errorf("%d attempts; want 1", a.n)
	}
}

// TestRedialKeepsAtMostMostWaiting: attempts that all go unanswered are
// at most `most` at once (the oldest given up as each new one begins), and the
// dial ends with its context, with the attempts' error, every attempt
// ended.
func TestRedialKeepsAtMostMostWaiting(t *testing.T) {
	t.Parallel()
	a := &attempts{ended: make(chan int, 1000)}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := redial(ctx, "addr", time.Millisecond, 3, a.dial)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("redial: %v, want the attempts' context deadline", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n < 5 {
		t.Fatalf("%d attempts in 200 ms, 1 ms apart; want more than the 3 at once", a.n)
	}
	if a.most > 3 {
		t.Errorf("%d attempts waited at once; want at most 3", a.most)
	}
	if a.now != 0 {
		t.Errorf("%d attempts still waiting after the dial ended; want none", a.now)
	}
}
