package pgstore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/internal/waittest"
)

// holders counts the sessions of application app holding replica id id.
func holders(t *testing.T, s *Store, app, id string) int {
	t.Helper()
	return len(holderPids(t, s, app, id))
}

// holderPids returns the backend pids of app's sessions that hold replica
// id. A session ended by pg_terminate_backend is listed until its backend
// has exited and so released the lock.
func holderPids(t *testing.T, s *Store, app, id string) []int {
	t.Helper()
	rows, err := s.pool.Query(t.Context(), `SELECT pid FROM pg_locks l JOIN pg_stat_activity a USING (pid)
WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = $2
AND l.classid::int = (hashtext('opsgate automator replica id ' || current_schema()))
AND l.objid::int = hashtext($1) AND l.objsubid = 2`, id, app+" replica id")
	if err != nil {
		t.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// TestAReplicaIDIsHeldByOneStoreAtATime: a second HoldReplicaID of an id
// held elsewhere is refused with ErrReplicaIDInUse, another id is not, and
// once the first is released the id is taken at once.
func TestAReplicaIDIsHeldByOneStoreAtATime(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	a, b := open(t, dsn), open(t, dsn)
	b.holdWait = 50 * time.Millisecond
	ha, err := a.HoldReplicaID(t.Context(), "r", nil)
	if err != nil {
		t.Fatalf("the first HoldReplicaID(r): %v", err)
	}
	if _, err := b.HoldReplicaID(t.Context(), "r", nil); !errors.Is(err, ErrReplicaIDInUse) {
		t.Fatalf("a second HoldReplicaID(r) = %v, want ErrReplicaIDInUse", err)
	}
	hb, err := b.HoldReplicaID(t.Context(), "s", nil)
	if err != nil {
		t.Fatalf("HoldReplicaID(s) beside r: %v", err)
	}
	hb.Release()
	ha.Release()
	b.holdWait = defaultHoldWait
	hb, err = b.HoldReplicaID(t.Context(), "r", nil)
	if err != nil {
		t.Fatalf("HoldReplicaID(r) once released: %v", err)
	}
	hb.Release()
}

// TestAReplicaIDHoldTakesItsIDAgainAfterItsConnectionIsLost: the session
// holding a replica id is ended (a database restart, say); the hold
// connects and takes the id again, and a second holder is still refused.
// If another process took the id meanwhile, the hold says so.
func TestAReplicaIDHoldTakesItsIDAgainAfterItsConnectionIsLost(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	a, app := openNamed(t, dsn)
	b, bApp := openNamed(t, dsn)
	a.holdPing, a.holdWait, b.holdWait = 20*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	// The second time the hold finds its connection lost, it waits for
	// proceed before it connects again.
	reconnecting := make(chan struct{})
	proceed := make(chan struct{})
	var once sync.Once
	goOn := func() { once.Do(func() { close(proceed) }) }
	losses := 0
	a.testHookHoldLost = func() {
		if losses++; losses == 2 {
			close(reconnecting)
			<-proceed
		}
	}
	lost := make(chan error, 1)
	h, err := a.HoldReplicaID(t.Context(), "r", func(err error) { lost <- err })
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	defer goOn() // before Release, whatever happens
	// terminate ends the session holding r and returns its pid. The
	// ended session holds r until its backend has exited, a moment after.
	terminate := func() int {
		t.Helper()
		pids := holderPids(t, b, app, "r")
		if len(pids) != 1 {
			t.Fatalf("sessions of a holding r: %v, want one", pids)
		}
		var ended bool
		if err := b.pool.QueryRow(t.Context(), `SELECT pg_terminate_backend($1)`, pids[0]).Scan(&ended); err != nil || !ended {
			t.Fatalf("ending the session holding r: %v, %v", ended, err)
		}
		return pids[0]
	}
	ended := terminate()
	waittest.Until(t, "the hold to take r again", func() bool {
		pids := holderPids(t, b, app, "r")
		return len(pids) == 1 && pids[0] != ended
	})
	if _, err := b.HoldReplicaID(t.Context(), "r", nil); !errors.Is(err, ErrReplicaIDInUse) {
		t.Fatalf("HoldReplicaID(r) after the hold took it again = %v, want ErrReplicaIDInUse", err)
	}

	// Lost again, and taken by b before a's hold connects again.
	terminate()
	select {
	case <-reconnecting:
	case <-time.After(10 * time.Second):
		t.Fatal("the hold did not notice its lost connection")
	}
	b.holdWait = 10 * time.Second // for the ended session's lock to go
	hb, err := b.HoldReplicaID(t.Context(), "r", nil)
	if err != nil {
		t.Fatalf("HoldReplicaID(r) of b while a's hold has lost it: %v", err)
	}
	defer hb.Release()
	goOn()
	select {
	case err := <-lost:
		if !errors.Is(err, ErrReplicaIDInUse) {
			t.Errorf("lost(%v), want ErrReplicaIDInUse", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the hold did not say that another took its id")
	}
	if n := holders(t, b, bApp, "r"); n != 1 {
		t.Errorf("%d sessions of b hold r, want 1", n)
	}
}

// TestAHoldTakingItsIDAgainEndsItsOwnFormerSession: after a partition the
// session that held a replica id for this process may outlive its
// connection in PostgreSQL; taking the id again ends that session rather
// than take it for another process's, while any other holder still
// refuses the id.
func TestAHoldTakingItsIDAgainEndsItsOwnFormerSession(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	s := open(t, dsn)
	s.holdWait = 50 * time.Millisecond
	former, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer former.Close(t.Context())
	var was session
	if err := former.QueryRow(t.Context(), `SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()`).Scan(&was.pid, &was.start); err != nil {
		t.Fatal(err)
	}
	if _, err := former.Exec(t.Context(), `SELECT pg_advisory_lock`+replicaLockKey, "r"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.takeReplicaID(t.Context(), "r", session{}); !errors.Is(err, ErrReplicaIDInUse) {
		t.Fatalf("taking r held by another session = %v, want ErrReplicaIDInUse", err)
	}
	// Not the same session: the same process id, another start.
	if _, _, err := s.takeReplicaID(t.Context(), "r", session{pid: was.pid, start: was.start.Add(-time.Second)}); !errors.Is(err, ErrReplicaIDInUse) {
		t.Fatalf("taking r held by a session of a reused process id = %v, want ErrReplicaIDInUse", err)
	}
	s.holdWait = defaultHoldWait // for the ended session's lock to go
	conn, _, err := s.takeReplicaID(t.Context(), "r", was)
	if err != nil {
		t.Fatalf("taking r held by the former session: %v", err)
	}
	closeConn(conn)
}

// TestReplicaIDsHeldNamesTheHeldIDsOnly: the ids held are listed, by the
// name their heartbeat gives, whether or not their heartbeats are recent;
// an id released is not, nor one held in another schema.
func TestReplicaIDsHeldNamesTheHeldIDsOnly(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	s, other := open(t, dsn), open(t, pgtest.DSN(t))
	for _, id := range []string{"held", "released"} {
		if err := s.ReplicaHeartbeat(t.Context(), store.ReplicaHeartbeatParams{ReplicaID: id, Hostname: "h", Version: "v", StartedAt: testNow, Now: testNow}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"held", "released", "unnamed"} {
		h, err := s.HoldReplicaID(t.Context(), id, nil)
		if err != nil {
			t.Fatal(err)
		}
		if id == "released" {
			h.Release()
		} else {
			defer h.Release()
		}
	}
	h, err := other.HoldReplicaID(t.Context(), "elsewhere", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	ids, err := s.ReplicaIDsHeld(t.Context())
	if want := []string{"", "held"}; err != nil || !slices.Equal(ids, want) {
		t.Errorf("ReplicaIDsHeld = %q, %v; want %q", ids, err, want)
	}
}

// TestTakingAReplicaIDThatGetsNoAnswerGivesUp: a database that stops
// answering while a replica takes its id (a connection cut off without a
// word) makes the taking fail once its bound has passed, rather than wait
// for the operating system to give the connection up.
func TestTakingAReplicaIDThatGetsNoAnswerGivesUp(t *testing.T) {
	t.Parallel()
	r := startMarkerRelay(t, pgtest.DSN(t), hang)
	s := open(t, r.dsn)
	t.Cleanup(r.close)
	// Long enough for the connection, the handshake and set_config to
	// be done first on a loaded machine (at 300 ms they once were not,
	// and the lock was never sent): only the lock goes unanswered.
	s.holdTimeout = 3 * time.Second
	r.arm([]byte("pg_advisory_lock"))
	taken := make(chan error, 1)
	go func() {
		_, err := s.HoldReplicaID(context.Background(), "r", nil)
		taken <- err
	}()
	waittest.Recv(t, r.fired, "the taking of the id to send its lock")
	select {
	case err := <-taken:
		if err == nil || errors.Is(err, ErrReplicaIDInUse) {
			t.Fatalf("HoldReplicaID with no answer = %v; want the error of the timeout", err)
		}
		t.Logf("HoldReplicaID returned: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("HoldReplicaID still waits for an answer after 10s")
	}
}
