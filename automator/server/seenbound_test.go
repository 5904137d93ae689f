package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// seenStore takes instances' polls and keeps nothing.
type seenStore struct{ store.Store }

func (seenStore) InstanceSeen(context.Context, store.InstanceSeenParams) error { return nil }

// TestPollsOfEverNewInstanceIDsKeepBoundedMemory: the instance id is the
// proxy's to choose, so one account's token can poll under as many ids as
// it likes. The automator keeps each instance's latest poll in memory
// (seenCache) so that it need not write every poll; that memory must stay
// bounded whatever the ids, or one account's token grows the automator that
// serves every account until it runs out of memory.
func TestPollsOfEverNewInstanceIDsKeepBoundedMemory(t *testing.T) {
	t.Parallel()
	s := &Server{store: seenStore{}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s.seen.batching = true // as under `automator serve` (RecordInstances)
	now := time.Now()
	const polls = 200_000
	for i := range polls {
		if err := s.instanceSeen(context.Background(), store.InstanceSeenParams{
			Account: "acme", InstanceID: fmt.Sprintf("i-%d", i), Hostname: "h", Version: "v", Now: now,
		}, pollSeen{}); err != nil {
			t.Fatal(err)
		}
	}
	s.seen.mu.Lock()
	n := len(s.seen.m)
	s.seen.mu.Unlock()
	if n > 1<<16 {
		t.Errorf("after polls under %d instance ids the automator keeps %d instances in memory, want at most %d", polls, n, 1<<16)
	}
}
