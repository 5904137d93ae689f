package server_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/store"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// syncLaterSeen records, per unit, whether its enqueue let the store answer
// before the unit was on disk (WorkEnqueueParams.SyncLater).
type syncLaterSeen struct {
	store.Store
	mu   sync.Mutex
	seen map[string]bool
}

func (s *syncLaterSeen) WorkEnqueue(ctx context.Context, p store.WorkEnqueueParams) (store.Work, error) {
	s.mu.Lock()
	s.seen[p.ID] = p.SyncLater
	s.mu.Unlock()
	return s.Store.WorkEnqueue(ctx, p)
}

func (s *syncLaterSeen) syncLater(t *testing.T, id string) bool {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.seen[id]
	if !ok {
		t.Fatalf("no enqueue of %s was seen", id)
	}
	return v
}

// TestSubmitAnswersOnlyOnceItsUnitIsDurable: Submit answers with the work
// id, which its caller keeps and waits on, so its unit is on disk before
// the answer (guarantee 3); only ExecuteOnProxy, whose caller learns the
// id only with the outcome, may enqueue without waiting for the fsync
// (store.WorkEnqueueParams.SyncLater; docs/guarantees.md). A SIGKILL
// cannot tell the two apart (the page cache survives it), so the test
// reads what the automator asked of the store.
func TestSubmitAnswersOnlyOnceItsUnitIsDurable(t *testing.T) {
	t.Parallel()
	var rec *syncLaterSeen
	e := newEnv(t, envOptions{wrap: func(s store.Store) store.Store {
		rec = &syncLaterSeen{Store: s, seen: map[string]bool{}}
		return rec
	}})
	st := submit(t, e.callerClient(), e.account, time.Minute)
	if rec.syncLater(t, st.GetWorkId()) {
		t.Errorf("Submit enqueued %s with SyncLater: it answered with the work id before the unit was on disk", st.GetWorkId())
	}
	// ExecuteOnProxy with nobody polling: it times out, answering with the
	// work id only then.
	out, err := e.callerClient().ExecuteOnProxy(context.Background(), &automatorv1.ExecuteRequest{
		Account: e.account, Command: &automatorv1.Command{Script: "x.sh"}, Timeout: durationpb.New(100 * time.Millisecond),
	})
	if err != nil {
		t.Fatalf("ExecuteOnProxy: %v", err)
	}
	if !rec.syncLater(t, out.GetWorkId()) {
		t.Errorf("ExecuteOnProxy enqueued %s without SyncLater; want it, as docs/guarantees.md says (or this test reads the wrong field)", out.GetWorkId())
	}
}
