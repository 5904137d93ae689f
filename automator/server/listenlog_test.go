package server_test

import (
	"context"
	"errors"
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
