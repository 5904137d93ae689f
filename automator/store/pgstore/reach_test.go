package pgstore

import (
	"context"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
)

// TestReachAnswersWhileThePoolIsBusyAndNotWhenTheDatabaseIsGone: Reach
// tells whether the database can be reached on a connection of its own:
// it answers while every connection of the pool is busy (held here, as by
// calls waiting on a lock), when the pool's Ping waits, and fails once
// the database cannot be reached (the way to it closed). A replica told a
// busy database for one out of reach, and closed its connections (a
// review).
func TestReachAnswersWhileThePoolIsBusyAndNotWhenTheDatabaseIsGone(t *testing.T) {
	t.Parallel()
	r := startMarkerRelay(t, pgtest.DSN(t), hang)
	u, err := url.Parse(r.dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", "1")
	u.RawQuery = q.Encode()
	s := open(t, u.String())
	held, err := s.pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	err = s.Ping(ctx)
	cancel()
	if err == nil {
		t.Fatal("Ping with the pool's one connection held: answered; want it to wait for the connection")
	}
	if err := s.Reach(t.Context()); err != nil {
		t.Errorf("Reach with the pool busy: %v; want the database reached", err)
	}
	held.Release()
	r.close()
	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := s.Reach(ctx); err == nil {
		t.Error("Reach with the way to the database closed: answered; want an error")
	}
}

// TestReachTakesARefusalFromPostgreSQLForReached: PostgreSQL refusing the
// connection with an error of its own (here a database that does not
// exist; at max_connections, too many clients) has answered: the
// database is reached, and every replica is refused alike, so none
// should send its proxies to another.
func TestReachTakesARefusalFromPostgreSQLForReached(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/no_such_database_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg) // connects lazily
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := &Store{pool: pool}
	if err := s.Reach(t.Context()); err != nil {
		t.Errorf("Reach of a database PostgreSQL says does not exist: %v; want it reached", err)
	}
}
