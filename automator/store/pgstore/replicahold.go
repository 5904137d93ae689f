package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrReplicaIDInUse: another running automator holds the replica id.
var ErrReplicaIDInUse = errors.New("replica id in use by a running automator")

// replicaLockKey is the session advisory lock that keeps a replica id to
// one running automator: two int4 keys, the first fixed for this program
// and the schema, the second the id's. (Two ids of one schema whose hashes
// collide, one chance in four billion, cannot run at once: give one
// another id.)
const replicaLockKey = `(hashtext('opsgate automator replica id ' || current_schema()), hashtext($1))`

// defaultHoldPing is how often a ReplicaHold checks that its connection,
// and so its lock, still stands, and how often it tries again to take the
// lock once it has lost it.
const defaultHoldPing = 10 * time.Second

// defaultHoldWait is how long taking a replica id waits for the session
// that holds it to end: a replica restarted at once after it was killed
// may find the session of its previous process not yet ended (PostgreSQL
// notices the closed connection within milliseconds, not at once).
const defaultHoldWait = 5 * time.Second

// defaultHoldTimeout bounds one taking of a replica id: connecting, and
// the few statements on the new connection, its wait for the lock
// included. Without it a statement on a connection cut off without a word
// waits for the operating system to give it up, a quarter of an hour on
// Linux: a replica would start that late, or take its id again that late.
const defaultHoldTimeout = defaultHoldWait + 10*time.Second

// codeLockNotAvailable is PostgreSQL's error when lock_timeout passes.
const codeLockNotAvailable = "55P03"

// ReplicaHold keeps a replica id to the one automator process that took
// it, for as long as it runs: a session advisory lock on a connection of
// its own, outside the pool. PostgreSQL releases it when that session
// ends: at Release, when the process exits or is killed (its operating
// system closes the connection), or within about half a minute when its
// host dies or is cut off (deadPeerSettings). So a replica restarted after
// a stop or a crash takes its id again at once, while a second process
// given the id of one that runs is refused.
type ReplicaHold struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// HoldReplicaID takes replica id id for this process until Release, or
// returns an error wrapping ErrReplicaIDInUse when another session holds
// it and keeps it for defaultHoldWait. When the connection holding it is
// lost (the database restarts, a failover), the hold connects and takes it
// again, every defaultHoldPing until it does; lost, when not nil, is
// called when it finds the id taken by another process meanwhile (with an
// error wrapping ErrReplicaIDInUse), at most once until it has it again.
func (s *Store) HoldReplicaID(ctx context.Context, id string, lost func(error)) (*ReplicaHold, error) {
	conn, held, err := s.takeReplicaID(ctx, id, session{})
	if err != nil {
		return nil, err
	}
	hctx, cancel := context.WithCancel(context.Background())
	h := &ReplicaHold{cancel: cancel, done: make(chan struct{})}
	go s.keepReplicaID(hctx, h.done, conn, held, id, lost)
	return h, nil
}

// Release gives the replica id up and waits until it has.
func (h *ReplicaHold) Release() {
	h.cancel()
	<-h.done
}

// session identifies a PostgreSQL session: a process id alone may be
// reused once its session has ended.
type session struct {
	pid   uint32
	start time.Time
}

// takeReplicaID connects and takes the lock of id; the returned
// connection, session got, holds it. prev, when set, is the session that
// held it before for this process, which lost its connection: PostgreSQL
// may not have noticed yet (a partition, rather than a closed socket,
// leaves it until its keepalives give up), so it is ended first, lest the
// hold take its own former session for another process.
func (s *Store) takeReplicaID(ctx context.Context, id string, prev session) (conn *pgx.Conn, got session, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.holdTimeout)
	defer cancel()
	cfg := s.listenConfig.Copy()
	cfg.RuntimeParams["application_name"] = s.pool.Config().ConnConfig.RuntimeParams["application_name"] + " replica id"
	conn, err = pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, got, fmt.Errorf("taking replica id %q on %s: connecting: %w", id, s.redacted, err)
	}
	if prev.pid != 0 {
		// Best effort: failing, the lock's wait below may still see it end.
		_, _ = conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = $1 AND backend_start = $2`,
			int64(prev.pid), prev.start)
	}
	// The lock waits Store.holdWait at most for the session holding it to
	// end.
	_, err = conn.Exec(ctx, `SELECT set_config('lock_timeout', $1, false)`, fmt.Sprintf("%dms", max(s.holdWait.Milliseconds(), 1)))
	if err == nil {
		_, err = conn.Exec(ctx, `SELECT pg_advisory_lock`+replicaLockKey, id)
	}
	if err == nil {
		got.pid = conn.PgConn().PID()
		err = conn.QueryRow(ctx, `SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()`).Scan(&got.start)
	}
	if code, _ := pgCode(err); code == codeLockNotAvailable {
		closeConn(conn)
		return nil, got, fmt.Errorf("taking replica id %q: %w", id, ErrReplicaIDInUse)
	}
	if err != nil {
		closeConn(conn)
		return nil, got, fmt.Errorf("taking replica id %q on %s: %w", id, s.redacted, err)
	}
	return conn, got, nil
}

// keepReplicaID pings the connection holding id, in session held, every
// Store.holdPing until ctx is done, then releases it. A connection that
// fails is replaced by one that takes the lock again.
func (s *Store) keepReplicaID(ctx context.Context, done chan<- struct{}, conn *pgx.Conn, held session, id string, lost func(error)) {
	defer close(done)
	defer func() {
		if conn != nil {
			closeConn(conn) // ending the session releases the lock
		}
	}()
	told := false // lost is called once per loss
	t := time.NewTicker(s.holdPing)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if conn != nil {
			pctx, cancel := context.WithTimeout(ctx, pingTimeout)
			err := conn.Ping(pctx)
			cancel()
			if err == nil || ctx.Err() != nil {
				continue
			}
			closeConn(conn)
			conn = nil
			if s.testHookHoldLost != nil {
				s.testHookHoldLost()
			}
		}
		c, got, err := s.takeReplicaID(ctx, id, held)
		switch {
		case err == nil:
			conn, held, told = c, got, false
		case errors.Is(err, ErrReplicaIDInUse) && lost != nil && !told:
			told = true
			lost(err)
		}
	}
}

// closeConn closes a connection, waiting a second at most.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn.Close(ctx)
}

// ReplicaIDsHeld returns the replica ids that running automators hold on
// this schema (HoldReplicaID), as the replicas' heartbeats name them: a
// held id no heartbeat names (its row purged, or not yet written) is
// returned as "". Unlike a heartbeat's age, a hold tells a replica that
// is paused or frozen, whose heartbeats stopped but which may go on, from
// one that has stopped.
func (s *Store) ReplicaIDsHeld(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT COALESCE(r.replica_id, '') FROM pg_locks l
LEFT JOIN replicas r ON l.objid::int = hashtext(r.replica_id)
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
AND l.classid::int = hashtext('opsgate automator replica id ' || current_schema())
ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("listing the replica ids held: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("listing the replica ids held: %w", err)
	}
	return ids, nil
}
