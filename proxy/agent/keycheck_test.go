package agent

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestEveryPollCarriesTheKeyChecksOfItsKeys: from the first, each poll
// carries the key check of every key the agent holds, in the order of its
// key ids, so the automator refuses a proxy holding another account's key
// (or a mistyped one) before it claims anything; an agent holding no keys
// sends none.
func TestEveryPollCarriesTheKeyChecksOfItsKeys(t *testing.T) {
	t.Parallel()
	previous := testKey
	previous.ID, previous.Secret[0] = testKey.ID+1, testKey.Secret[0]^1
	for _, keys := range []crypto.Keys{{testKey}, {previous, testKey}, nil} {
		f := newFake()
		o := Options{
			tune:   testTuning(t),
			Client: f, InstanceID: "a", ScriptsDir: t.TempDir(),
			MaxConcurrency: 2, PollWait: time.Second, GracePeriod: time.Second,
			BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(&lockedWriter{b: &bytes.Buffer{}}, nil)),
		}
		if keys != nil {
			o.Keys = keys
		}
		a := New(o)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { a.Run(ctx); close(done) }()
		f.responses <- &automatorv1.PollResponse{}
		waittest.Until(t, "two polls", func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return len(f.polls) >= 2
		})
		cancel()
		waittest.Recv(t, done, "the agent's Run to return")
		f.mu.Lock()
		polls := f.polls[:2]
		f.mu.Unlock()
		for i, p := range polls {
			ids, checks := p.GetKeyIds(), p.GetKeyChecks()
			if len(checks) != len(keys) || len(ids) != len(keys) {
				t.Errorf("holding %d keys, poll %d lists key ids %v and %d key checks; want one of each per key", len(keys), i+1, ids, len(checks))
				continue
			}
			for j, id := range ids {
				k, _ := keys.Key(id)
				if !bytes.Equal(checks[j], crypto.KeyCheck(k)) {
					t.Errorf("poll %d: key check %d (key id %d) is %x, want %x", i+1, j, id, checks[j], crypto.KeyCheck(k))
				}
			}
		}
	}
}
