package server_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/internal/waittest"
)

// flakyListener fails its first fails Listens, as a Broadcaster whose
// database is out of reach does, then listens until its context ends.
type flakyListener struct {
	fails     int
	listening chan struct{} // closed once a Listen has said EventResumed
}

func (*flakyListener) Publish(context.Context, server.Event) error { return nil }

func (b *flakyListener) Listen(ctx context.Context, fn func(server.Event)) error {
	if b.fails > 0 {
		b.fails--
		return errors.New("connecting: dial tcp 10.0.0.5:5432: connection refused")
	}
	fn(server.Event{Kind: server.EventResumed})
	close(b.listening)
	<-ctx.Done()
	return nil
}

// TestLostEventConnectionIsLoggedOncePerChange: while the replica cannot
// listen for the other replicas' events, it retries every sweep interval
// and says so once, not at every retry; when it listens again it says that
// once.
func TestLostEventConnectionIsLoggedOncePerChange(t *testing.T) {
	t.Parallel()
	log := &syncLog{}
	b := &flakyListener{fails: 5, listening: make(chan struct{})}
	newEnv(t, envOptions{broadcaster: b, sweepInterval: 5 * time.Millisecond, log: log})
	waittest.Recv(t, b.listening, "the listener to listen after 5 failures")

	if got := log.lines("level=WARN", "queue events of other replicas", "connection refused"); len(got) != 1 {
		t.Errorf("warnings of the lost event connection over 5 failed attempts: %q; want 1", got)
	}
	if got := log.lines("level=INFO", "queue events of other replicas again"); len(got) != 1 {
		t.Errorf("lines saying it listens again: %q; want 1", got)
	}
}

// steppedListener fails its Listens until listen is closed; then one
// listens until drop is closed. The Listens after drop wait for their
// context.
type steppedListener struct {
	listen, drop chan struct{}
	failedOnce   chan struct{} // closed at the second Listen: the first failed
	listening    chan struct{} // closed once a Listen has said EventResumed
	afterDrop    chan struct{} // closed at the first Listen after drop
	n            atomic.Int64
	once         sync.Once
}

func (*steppedListener) Publish(context.Context, server.Event) error { return nil }

func (b *steppedListener) Listen(ctx context.Context, fn func(server.Event)) error {
	if b.n.Add(1) == 2 {
		close(b.failedOnce)
	}
	select {
	case <-b.drop:
		b.once.Do(func() { close(b.afterDrop) })
		<-ctx.Done()
		return nil
	default:
	}
	select {
	case <-b.listen:
	default:
		return errors.New("connecting: dial tcp 10.0.0.5:5432: connection refused")
	}
	fn(server.Event{Kind: server.EventResumed})
	close(b.listening)
	select {
	case <-b.drop:
		return errors.New("the connection stopped answering")
	case <-ctx.Done():
		return nil
	}
}

// TestListeningSaysWhetherTheReplicaHearsTheOthers: Listening is false
// until the Broadcaster listens, true while it does, and false again once
// it has lost its connection.
func TestListeningSaysWhetherTheReplicaHearsTheOthers(t *testing.T) {
	t.Parallel()
	b := &steppedListener{listen: make(chan struct{}), drop: make(chan struct{}),
		failedOnce: make(chan struct{}), listening: make(chan struct{}), afterDrop: make(chan struct{})}
	e := newEnv(t, envOptions{broadcaster: b, sweepInterval: 5 * time.Millisecond})
	waittest.Recv(t, b.failedOnce, "a second Listen, the first having failed")
	if e.srv.Listening() {
		t.Error("Listening is true while every Listen fails")
	}
	close(b.listen)
	waittest.Recv(t, b.listening, "a Listen to listen")
	if !e.srv.Listening() {
		t.Error("Listening is false while the Broadcaster listens")
	}
	close(b.drop)
	waittest.Recv(t, b.afterDrop, "the next Listen, the connection lost")
	if e.srv.Listening() {
		t.Error("Listening is true after the Broadcaster lost its connection")
	}
}
