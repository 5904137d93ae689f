package pgstore_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/crypto"
)

// countingExpire counts the sweeps a server makes.
type countingExpire struct {
	store.Store
	sweeps atomic.Int64
}

func (c *countingExpire) WorkExpire(ctx context.Context, p store.WorkExpireParams) ([]store.Work, error) {
	c.sweeps.Add(1)
	return c.Store.WorkExpire(ctx, p)
}

// TestTheSweeperDoesNotSpinOnADueUnitAnotherSessionHolds: a sweep skips a
// due unit whose row another session holds locked (a replica cut off in
// the middle of completing it, until PostgreSQL finds its connection dead,
// up to half a minute). The unit stays open with its deadline past, so the
// next deadline the sweeper reads is now: it must not sweep again at once,
// over and over, for as long as the lock is held (two statements per turn,
// on every replica, at full speed).
func TestTheSweeperDoesNotSpinOnADueUnitAnotherSessionHolds(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	ctx := t.Context()
	st, err := pgstore.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	if _, err := st.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte("h"), KeyID: 1, SealedKey: []byte("k"), Now: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: "held", Account: "acme", KeyID: 1, SealedCommand: []byte("c"),
		Now: now.Add(-time.Minute), Deadline: now.Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
	pgtest.LockWorkRow(t, dsn, "held")

	master, err := crypto.NewMasterKey()
	if err != nil {
		t.Fatal(err)
	}
	counted := &countingExpire{Store: st}
	srv, err := server.New(server.Options{Store: counted, MasterKey: master, SweepInterval: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { srv.Run(rctx); close(ran) }()
	time.Sleep(time.Second)
	cancel()
	<-ran
	// A few sweeps a second is a retry; thousands are a spin.
	if n := counted.sweeps.Load(); n > 20 {
		t.Errorf("the sweeper swept %d times in a second while a due unit was held locked; want at most a few (it spins)", n)
	}
}
