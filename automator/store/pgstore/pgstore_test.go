package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/automator/store/storetest"
	"github.com/opsgate/opsgate/internal/closedport"
)

func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "pgstore: leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// open opens a store on dsn for t and closes it when t ends.
func open(t *testing.T, dsn string) *Store {
	t.Helper()
	s, err := Open(t.Context(), dsn)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, pgtest.DSN(t))
	})
}

var testNow = time.Date(2026, 1, 2, 3, 4, 5, 678901000, time.UTC)

// migrationRows returns schema_migrations as version → applied_at.
func migrationRows(t *testing.T, s *Store) map[int]time.Time {
	t.Helper()
	rows, err := s.pool.Query(t.Context(), `SELECT version, applied_at FROM schema_migrations`)
	if err != nil {
		t.Fatalf("reading schema_migrations: %v", err)
	}
	defer rows.Close()
	out := map[int]time.Time{}
	for rows.Next() {
		var v int
		var at time.Time
		if err := rows.Scan(&v, &at); err != nil {
			t.Fatalf("reading schema_migrations: %v", err)
		}
		out[v] = at
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("reading schema_migrations: %v", err)
	}
	return out
}

// TestReplicasStartingTogetherMigrateOnce opens several stores on one empty
// schema at the same moment, as replicas started together do: every Open
// succeeds and each migration is applied once. Without the advisory lock
// the losers fail on "relation already exists" (or a duplicate key in the
// catalog).
func TestReplicasStartingTogetherMigrateOnce(t *testing.T) {
	t.Parallel()
	const replicas = 4
	dsn := pgtest.DSN(t)
	var (
		wg     sync.WaitGroup
		start  = make(chan struct{})
		stores = make([]*Store, replicas)
		errs   = make([]error, replicas)
	)
	for i := range replicas {
		wg.Go(func() {
			<-start
			stores[i], errs[i] = Open(t.Context(), dsn)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: Open: %v", i, err)
			continue
		}
		t.Cleanup(func() { stores[i].Close() })
	}
	if t.Failed() {
		return
	}
	first := migrationRows(t, stores[0])
	if len(first) != len(migrations) {
		t.Fatalf("schema_migrations holds %d rows, want %d (one per migration)", len(first), len(migrations))
	}

	// Opening again applies nothing.
	again := open(t, dsn)
	for v, at := range migrationRows(t, again) {
		if !at.Equal(first[v]) {
			t.Errorf("migration %d: applied_at %v after reopening, was %v: applied twice", v, at, first[v])
		}
	}
}

func TestMigrationsAreOrdered(t *testing.T) {
	t.Parallel()
	for i, m := range migrations {
		if m.version != i+1 {
			t.Errorf("migrations[%d] has version %d, want %d", i, m.version, i+1)
		}
		if m.name == "" || strings.TrimSpace(m.sql) == "" {
			t.Errorf("migration %d has no name or no SQL", m.version)
		}
	}
}

func TestOpenRefusesANewerSchema(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	s := open(t, dsn)
	if _, err := s.pool.Exec(t.Context(), `INSERT INTO schema_migrations (version) VALUES (999)`); err != nil {
		t.Fatalf("inserting a future version: %v", err)
	}
	_, err := Open(t.Context(), dsn)
	if err == nil || !strings.Contains(err.Error(), "999") {
		t.Errorf("Open of a schema from the future: error = %v, want one naming version 999", err)
	}
}

// TestAReplicaStaysReadyWhenAnotherMigratesAhead: in a rolling upgrade the
// first new replica applies its migrations while the old ones keep
// serving (migrations only add), so an old replica's Ping, behind its
// /readyz, still answers ready on a schema newer than it knows; one older
// than it needs is not ready.
func TestAReplicaStaysReadyWhenAnotherMigratesAhead(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.DSN(t))
	latest := migrations[len(migrations)-1].version
	if _, err := s.pool.Exec(t.Context(), `INSERT INTO schema_migrations (version) VALUES ($1)`, latest+1); err != nil {
		t.Fatalf("inserting the next version: %v", err)
	}
	if err := s.Ping(t.Context()); err != nil {
		t.Errorf("Ping on a schema one version ahead: %v, want nil (the old replica keeps serving)", err)
	}
	if _, err := s.pool.Exec(t.Context(), `DELETE FROM schema_migrations WHERE version >= $1`, latest); err != nil {
		t.Fatalf("removing the latest versions: %v", err)
	}
	if err := s.Ping(t.Context()); !errors.As(err, new(*store.SchemaBehindError)) {
		t.Errorf("Ping on a schema one version behind: %v, want a *store.SchemaBehindError (/readyz's log tells it from a store that does not answer)", err)
	}
}

func TestOpenRefusesOtherURLsAndHidesThePassword(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{"automator.db", "mysql://u:secret@h/db", "sqlite:x.db"} {
		_, err := Open(t.Context(), dsn)
		if err == nil || !strings.Contains(err.Error(), "postgres://") {
			t.Errorf("Open(%q): error = %v, want one suggesting a postgres:// URL", dsn, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q): the error shows the password: %v", dsn, err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := Open(ctx, "postgres://automator:hunter2@127.0.0.1:1/db?sslmode=disable&connect_timeout=5")
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("Open of an unreachable server: error = %v, want one naming the server without its password", err)
	}
	if got := Redact("postgres://u:p%40ss@h:5432/db?password=qwerty&sslmode=disable"); strings.Contains(got, "p%40ss") || strings.Contains(got, "qwerty") {
		t.Errorf("Redact left a password in %q", got)
	}
}

// TestAMissingPasswordSaysWhereToGiveIt: a URL without a password, opened
// with neither PGPASSWORD nor a password file to supply it (a command run
// by hand in a shell that lacks the replicas' environment), is refused by
// a server that asks for one; the error says where the password goes,
// rather than PostgreSQL's bare "password authentication failed".
func TestAMissingPasswordSaysWhereToGiveIt(t *testing.T) {
	// Not parallel: it sets PGPASSWORD and PGPASSFILE (t.Setenv), which
	// every Open reads.
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(u.User.Username())
	t.Setenv("PGPASSWORD", "")
	t.Setenv("PGPASSFILE", filepath.Join(t.TempDir(), "no-such-pgpass"))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, u.String())
	if err == nil {
		s.Close()
		t.Skipf("the server %s lets %s in without a password: nothing to refuse", pgtest.Redacted(u.String()), u.User.Username())
	}
	if code, _ := pgCode(err); code != codeInvalidPassword {
		t.Fatalf("Open without a password: %v, want SQLSTATE %s", err, codeInvalidPassword)
	}
	for _, want := range []string{"no password was given", "PGPASSWORD", ".pgpass"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Open without a password: %v\nwant it to say %q", err, want)
		}
	}
}

func TestIsDSN(t *testing.T) {
	t.Parallel()
	for dsn, want := range map[string]bool{
		"postgres://h/db":        true,
		"postgresql://u@h:1/db":  true,
		"automator.db":           false,
		"sqlite:automator.db":    false,
		"/var/lib/automator.db":  false,
		"host=localhost user=me": false,
	} {
		if got := IsDSN(dsn); got != want {
			t.Errorf("IsDSN(%q) = %t, want %t", dsn, got, want)
		}
	}
}

// twoReplicas opens two stores, with a pool each, on one schema with one
// account, as two automator replicas.
func twoReplicas(t *testing.T) (a, b *Store) {
	t.Helper()
	dsn := pgtest.DSN(t)
	a, b = open(t, dsn), open(t, dsn)
	if _, err := a.AccountCreate(t.Context(), store.AccountCreateParams{Name: "acme", TokenHash: []byte("h"), KeyID: 1, SealedKey: []byte("k"), Now: testNow}); err != nil {
		t.Fatalf("AccountCreate: %v", err)
	}
	return a, b
}

func enqueue(t *testing.T, s *Store, id string, queuedAt, deadline time.Time) {
	t.Helper()
	if _, err := s.WorkEnqueue(t.Context(), store.WorkEnqueueParams{
		ID: id, Account: "acme", KeyID: 1, SealedCommand: []byte("c"), Now: queuedAt, Deadline: deadline,
	}); err != nil {
		t.Fatalf("WorkEnqueue(%s): %v", id, err)
	}
}

// TestTwoReplicasExpiringConcurrentlyNeverReturnTheSameUnit: the deadline
// sweepers of two replicas run at once over the same due units.
func TestTwoReplicasExpiringConcurrentlyNeverReturnTheSameUnit(t *testing.T) {
	t.Parallel()
	const units = 400
	a, b := twoReplicas(t)
	for i := range units {
		enqueue(t, a, fmt.Sprintf("w-%03d", i), testNow.Add(time.Duration(i)*time.Microsecond), testNow.Add(time.Minute))
	}
	now := testNow.Add(time.Hour)
	var (
		mu   sync.Mutex
		got  = map[string][]string{}
		wg   sync.WaitGroup
		errs []error
	)
	for _, r := range []struct {
		name string
		s    *Store
	}{{"a", a}, {"b", b}, {"a", a}, {"b", b}} {
		wg.Go(func() {
			for {
				ws, err := r.s.WorkExpire(t.Context(), store.WorkExpireParams{Now: now, Max: 9})
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				}
				for _, w := range ws {
					got[w.ID] = append(got[w.ID], r.name)
				}
				mu.Unlock()
				if err != nil || len(ws) == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Errorf("WorkExpire: %v", err)
	}
	rest, err := a.WorkExpire(t.Context(), store.WorkExpireParams{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range rest {
		got[w.ID] = append(got[w.ID], "final")
	}
	byReplica := map[string]int{}
	for id, who := range got {
		if len(who) != 1 {
			t.Errorf("unit %s expired %d times, by %v", id, len(who), who)
		}
		byReplica[who[0]]++
	}
	if len(got) != units {
		t.Errorf("%d units expired, want %d", len(got), units)
	}
	t.Logf("expired per replica: %v", byReplica)
}

// TestTwoReplicasClaimingNeverShareAUnit: claimers on two replicas (two
// pools) race for one account's queue.
func TestTwoReplicasClaimingNeverShareAUnit(t *testing.T) {
	t.Parallel()
	const units = 400
	a, b := twoReplicas(t)
	for i := range units {
		enqueue(t, a, fmt.Sprintf("w-%03d", i), testNow.Add(time.Duration(i)*time.Microsecond), testNow.Add(time.Hour))
	}
	var (
		mu   sync.Mutex
		got  = map[string]int{}
		wg   sync.WaitGroup
		errs []error
	)
	for i := range 6 {
		s := []*Store{a, b}[i%2]
		wg.Go(func() {
			for n := 0; ; n++ {
				ws, err := s.WorkClaim(t.Context(), store.WorkClaimParams{
					Account: "acme", InstanceID: fmt.Sprintf("i-%d", i), Max: 5,
					ClaimIDs: []string{"c0", "c1", "c2", "c3", "c4"}, Now: testNow.Add(time.Second),
				})
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				}
				for _, w := range ws {
					got[w.ID]++
				}
				mu.Unlock()
				if err != nil || len(ws) == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Errorf("WorkClaim: %v", err)
	}
	if len(got) != units {
		t.Errorf("%d units claimed, want %d", len(got), units)
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("unit %s claimed %d times", id, n)
		}
	}
}

// TestSameIdempotencyKeyOnTwoReplicasMakesOneUnit: the unique index, not a
// lock in one process, makes a key count once.
func TestSameIdempotencyKeyOnTwoReplicasMakesOneUnit(t *testing.T) {
	t.Parallel()
	a, b := twoReplicas(t)
	const n = 16
	var wg sync.WaitGroup
	ids := make([]string, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		s := []*Store{a, b}[i%2]
		wg.Go(func() {
			<-start
			w, err := s.WorkEnqueue(t.Context(), store.WorkEnqueueParams{
				ID: fmt.Sprintf("w-%d", i), Account: "acme", SealedCommand: []byte("c"),
				Now: testNow, Deadline: testNow.Add(time.Minute),
				IdempotencyKey: "k", IdempotencySince: testNow.Add(-time.Hour),
			})
			ids[i], errs[i] = w.ID, err
		})
	}
	close(start)
	wg.Wait()
	created := 0
	for i := range n {
		switch {
		case errs[i] == nil:
			created++
		case !strings.Contains(errs[i].Error(), store.ErrDuplicate.Error()):
			t.Errorf("enqueue %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Errorf("enqueue %d returned %q, enqueue 0 %q", i, ids[i], ids[0])
		}
	}
	if created != 1 {
		t.Errorf("%d enqueues created a unit, want 1", created)
	}
}

// TestConformanceUnderANaturalLanguageCollation runs the suite in a
// database whose default collation is en-US's, not C's: every listing must
// still order names and ids byte by byte, as SQLite does.
func TestConformanceUnderANaturalLanguageCollation(t *testing.T) {
	t.Parallel()
	db := pgtest.CollatedDatabase(t, "en-US")
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, pgtest.DSNIn(t, db))
	})
}

// TestErrorsOfAnUnreachableServerAreUnavailable: what pgx returns when
// PostgreSQL ends a session (as a restart does: SQLSTATE 57P01) or refuses
// a connection is store.IsUnavailable, which the server answers as
// UNAVAILABLE; a query's own error is not.
func TestErrorsOfAnUnreachableServerAreUnavailable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	base := pgtest.URL(t)
	app := fmt.Sprintf("opsgate-unavailable-%d", time.Now().UnixNano())
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	victim, err := pgx.Connect(ctx, base+sep+"application_name="+app)
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close(context.Background())
	_, err = victim.Exec(ctx, "SELECT * FROM no_such_table")
	if err == nil || store.IsUnavailable(err) {
		t.Errorf("a query's own error %v counts as the server being unreachable", err)
	}
	killer, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer killer.Close(context.Background())
	var n int
	if err := killer.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n); err != nil || n != 1 {
		t.Fatalf("terminating the session: %d sessions, %v", n, err)
	}
	if _, err := victim.Exec(ctx, "SELECT 1"); !store.IsUnavailable(err) {
		t.Errorf("a query on a session the server ended: %v; want an error store.IsUnavailable recognises", err)
	}
	if _, err := victim.Exec(ctx, "SELECT 1"); !store.IsUnavailable(err) {
		t.Errorf("a query on the connection that broke: %v; want an error store.IsUnavailable recognises", err)
	}
	// A port nothing listens on, held so that nothing can.
	_, err = pgx.Connect(ctx, fmt.Sprintf("postgres://u:p@%s/db?sslmode=disable&connect_timeout=5", closedport.Addr(t)))
	if !store.IsUnavailable(err) {
		t.Errorf("connecting to a server that is down: %v; want an error store.IsUnavailable recognises", err)
	}
}

// TestRedactHidesTheClientKeyPassword: a DSN's sslpassword (which opens
// an encrypted client key) is a secret like its password: the "serving"
// log line and store errors (in the log) show the DSN redacted.
func TestRedactHidesTheClientKeyPassword(t *testing.T) {
	t.Parallel()
	got := Redact("postgres://u@h:5432/db?sslmode=verify-full&sslkey=client.key&sslpassword=s3cr3t-key-pass")
	if strings.Contains(got, "s3cr3t-key-pass") {
		t.Errorf("Redact left the client key's password in %q", got)
	}
	if !strings.Contains(got, "sslkey=client.key") || !strings.Contains(got, "h:5432") {
		t.Errorf("Redact = %q; want the rest of the DSN kept", got)
	}
}

// TestOpenOfADatabaseThatDoesNotAnswerSaysSo: an open (a command's, a
// serve starting) that reaches no PostgreSQL says so and what to do, not
// the driver's dial error alone (a review); one PostgreSQL refuses says
// its refusal (no such word).
func TestOpenOfADatabaseThatDoesNotAnswerSaysSo(t *testing.T) {
	t.Parallel()
	_, err := Open(t.Context(), fmt.Sprintf("postgres://u:p@%s/db?sslmode=disable&connect_timeout=5", closedport.Addr(t)))
	if want := "PostgreSQL could not be reached ("; err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "start it, or mend the host and port of db") {
		t.Errorf("Open of a port nothing listens on: %v; want it to say %q and what to do", err, want)
	}
	// A server that answers, refusing TLS (a re-review: told as not
	// reached).
	noTLS := closedport.Accepting(t, func(conn net.Conn) {
		buf := make([]byte, 8) // the SSLRequest
		if _, err := io.ReadFull(conn, buf); err == nil {
			_, _ = conn.Write([]byte("N"))
		}
	})
	if _, err := Open(t.Context(), fmt.Sprintf("postgres://u:p@%s/db?sslmode=require&connect_timeout=5", noTLS)); err == nil || strings.Contains(err.Error(), "could not be reached") {
		t.Errorf("Open of a server that refuses TLS: %v; want its refusal, not that it could not be reached", err)
	}
	if _, err := Open(t.Context(), pgtest.DSN(t)+"&dbname=opsgate_no_such_database"); err == nil || strings.Contains(err.Error(), "could not be reached") {
		t.Errorf("Open of a database that does not exist: %v; want PostgreSQL's refusal, not that it could not be reached", err)
	}
}
