package pgstore_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/waittest"
)

// expiredStore tells of the units each WorkExpire ended.
type expiredStore struct {
	store.Store
	ended chan []store.Work
}

func (s *expiredStore) WorkExpire(ctx context.Context, p store.WorkExpireParams) ([]store.Work, error) {
	ws, err := s.Store.WorkExpire(ctx, p)
	if len(ws) > 0 {
		s.ended <- ws
	}
	return ws, err
}

// TestAReplicaTimesOutAnUnclaimedUnitNamingTheInstancesAnotherRecorded:
// the reason of a unit no instance claimed comes from the instances'
// records in the shared database, not from what the sweeping replica saw
// itself: here every poll was recorded by another replica (one instance
// stopped gracefully, one last polled an hour ago, one that polls and is
// refused for want of a usable key), and the replica that times the unit
// out names all three, the refused one first, and lists it refused.
func TestAReplicaTimesOutAnUnclaimedUnitNamingTheInstancesAnotherRecorded(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	ctx := t.Context()
	open := func() *pgstore.Store {
		st, err := pgstore.Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	other, sweeping := open(), open()
	now := time.Now().UTC().Truncate(time.Microsecond)
	if _, err := other.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte("h"), KeyID: 1, SealedKey: []byte("k"), Now: now}); err != nil {
		t.Fatal(err)
	}
	stopped, gone := now.Add(-10*time.Second), now.Add(-time.Hour)
	for _, p := range []store.InstanceSeenParams{
		{Account: "acme", InstanceID: "p1", Hostname: "p1", Version: "v1", Stopping: true, Now: stopped},
		{Account: "acme", InstanceID: "p2", Hostname: "p2", Version: "v1", Now: gone},
		{Account: "acme", InstanceID: "p3", Hostname: "p3", Version: "v1", RefusedKeyIDs: []uint32{1}, Now: now.Add(-20 * time.Second)},
	} {
		if err := other.InstanceSeen(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if list, err := sweeping.InstanceList(ctx, "acme"); err != nil || len(list) != 3 || len(list[2].RefusedKeyIDs) != 1 || list[2].RefusedKeyIDs[0] != 1 {
		t.Fatalf("InstanceList on the sweeping replica = %+v, %v; want p3 refused holding key id 1", list, err)
	}
	if _, err := other.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: "w-1", Account: "acme", KeyID: 1, SealedCommand: []byte("c"),
		Now: now.Add(-time.Minute), Deadline: now.Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}

	master, err := crypto.NewMasterKey()
	if err != nil {
		t.Fatal(err)
	}
	watched := &expiredStore{Store: sweeping, ended: make(chan []store.Work, 1)}
	srv, err := server.New(server.Options{Store: watched, MasterKey: master,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { srv.Run(rctx); close(ran) }()
	defer func() { cancel(); <-ran }()
	ended := waittest.Recv(t, watched.ended, "the sweeper to time out unit w-1")

	want := "no instance claimed it before the deadline: no instance of account acme was online (" +
		"instance p3 polls but holds no usable key: install the account's latest profile; p1 stopped at " +
		stopped.Format(time.RFC3339) + "; p2 last polled at " + gone.Format(time.RFC3339) + ")"
	if len(ended) != 1 || ended[0].Reason != want {
		t.Fatalf("the sweeper ended %+v\nwant unit w-1 with reason %q", ended, want)
	}
	if w, err := other.WorkGet(ctx, "w-1"); err != nil || w.Reason != want {
		t.Errorf("WorkGet(w-1) on the other replica = reason %q, %v; want %q", w.Reason, err, want)
	}
}
