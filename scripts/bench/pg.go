//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// pgNotMeasured leaves the PostgreSQL rows in the table, saying why they
// are empty.
func (b *bench) pgNotMeasured(why string) {
	r := b.res
	for _, f := range pgFigures(r) {
		f.note("PostgreSQL: not measured: %s", why)
	}
}

func pgFigures(r *results) []*figure {
	return []*figure{
		r.baseline("pg_raw_16", "raw PostgreSQL FOR UPDATE SKIP LOCKED cycle, 16 connections", "cycles/s"),
		r.fig("pg_ping_64_r1", "`@ping` throughput, 64 callers, PostgreSQL, 1 replica", "units/s").
			vs("pg_raw_16", goal{}, ""),
		r.fig("pg_ping_64_r3", "`@ping` throughput, 64 callers, PostgreSQL, 3 replicas", "units/s").
			vs("pg_raw_16", goal{goalRatioAtLeast, 0.80}, "≥ 80 % of raw SKIP LOCKED cycle, 16 connections"),
	}
}

// pgSection: a throwaway cluster from scripts/pg-start.sh, made durable
// (fsync, synchronous_commit and full_page_writes on, as a production
// server), then the raw cycle and the automator with 1 and 3 replicas.
func (b *bench) pgSection(ctx context.Context) error {
	figs := pgFigures(b.res)
	start, stop := filepath.Join("scripts", "pg-start.sh"), filepath.Join("scripts", "pg-stop.sh")
	if _, err := os.Stat(start); err != nil {
		b.pgNotMeasured(start + " not found (run from the repository root)")
		return nil
	}
	b.logf("pg: starting a throwaway cluster")
	out, err := run(start)
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 3 {
		b.pgNotMeasured("no PostgreSQL binaries on this machine")
		return nil
	}
	if err != nil {
		b.pgNotMeasured("the cluster did not start")
		return err
	}
	var dsn, dir string
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "export AUTOMATOR_TEST_POSTGRES="); ok {
			dsn = strings.Trim(v, "'")
		}
		if v, ok := strings.CutPrefix(line, "export AUTOMATOR_TEST_PGDIR="); ok {
			dir = strings.Trim(v, "'")
		}
	}
	if dir != "" {
		defer func() {
			if _, err := run(stop, dir); err != nil {
				b.logf("pg: stopping the cluster: %v", err)
			}
		}()
	}
	if dsn == "" {
		b.pgNotMeasured("pg-start.sh printed no URL")
		return fmt.Errorf("pg-start.sh printed no AUTOMATOR_TEST_POSTGRES line: %q", out)
	}
	if err := pgPrepare(ctx, dsn); err != nil {
		b.pgNotMeasured("preparing the cluster failed")
		return err
	}
	pgPID := 0
	if data, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid")); err == nil {
		first, _, _ := strings.Cut(string(data), "\n")
		pgPID, _ = strconv.Atoi(strings.TrimSpace(first))
	}

	// Replica set 1: one automator, two instances.
	r1, err := b.pgAutomators(ctx, "pg1", "bench_r1", withDB(dsn, "bench_r1"), 1)
	if err != nil {
		b.pgNotMeasured("the PostgreSQL store did not serve: " + firstLine(err))
		return err
	}
	// Replica set 3: three automators on one database; one instance on each
	// of the first two, callers spread over all three, so units queued on
	// the third are claimed and completed through the others.
	r3, err := b.pgAutomators(ctx, "pg3", "bench_r3", withDB(dsn, "bench_r3"), 3)
	if err != nil {
		b.pgNotMeasured("three replicas did not serve: " + firstLine(err))
		return err
	}
	if pgPID > 0 {
		for _, set := range []*pgSet{r1, r3} {
			set.pids["postgres"+treeSuffix] = pgPID
			set.order = append(set.order, "postgres"+treeSuffix)
		}
	}
	raw, err := newRawPG(ctx, withDB(dsn, "bench_raw"))
	if err != nil {
		return err
	}
	defer raw.close()

	for run := 1; run <= b.p.runs && ctx.Err() == nil; run++ {
		b.logf("pg run %d/%d: raw cycle", run, b.p.runs)
		res := closedLoop(ctx, 16, b.p.warm, b.p.dur, watch{pids: map[string]int{"postgres" + treeSuffix: pgPID, "load generator": os.Getpid()}}, raw.cycle)
		if err := loopErr("raw PostgreSQL cycle", res); err != nil {
			return err
		}
		figs[0].add(run, res.rate)
		if run == b.p.runs && pgPID > 0 {
			figs[0].note("%s, last run", describeCPU(res.cpu, "postgres"+treeSuffix, "load generator"))
		}
		for i, set := range []*pgSet{r1, r3} {
			b.logf("pg run %d/%d: @ping at 64 callers, %d replica(s)", run, b.p.runs, len(set.replicas))
			x0, xerr := pgXacts(ctx, dsn, set.db)
			c0 := set.calls.Load()
			res := closedLoop(ctx, 64, b.p.warm, b.p.dur, watch{pids: set.pids, metrics: metricsOf(set.replicas...)}, set.call)
			if err := loopErr("@ping on PostgreSQL", res); err != nil {
				return err
			}
			perUnit := ""
			if xerr == nil {
				// The statistics reach the shared counters within a second
				// of a backend going idle.
				time.Sleep(1500 * time.Millisecond)
				x1, err := pgXacts(ctx, dsn, set.db)
				if n := set.calls.Load() - c0; err == nil && n > 0 {
					perUnit = fmt.Sprintf("; %s PostgreSQL transactions per unit (%d over %d units, warm-up included)",
						format(float64(x1-x0)/float64(n), ""), x1-x0, n)
				}
			}
			figs[1+i].add(run, res.rate)
			if run == b.p.runs {
				figs[1+i].note("call latency p50 %s, p99 %s; %s%s; %s, last run", format(ms(percentile(res.lat, 50)), "ms"),
					format(ms(percentile(res.lat, 99)), "ms"), describeCPU(res.cpu, set.order...), perUnit, describeBatches(res))
			}
		}
	}
	if b.profDir != "" && ctx.Err() == nil {
		for _, set := range []*pgSet{r1, r3} {
			b.profileLoad(ctx, set.replicas[0], fmt.Sprintf("automator-pg%d-replica1", len(set.replicas)), 64, set.pids, set.order, set.call)
		}
	}
	figs[0].note("pgx pool of 16, each cycle three committed transactions (INSERT; UPDATE … FOR UPDATE SKIP LOCKED; UPDATE) with fsync and synchronous_commit on")
	return ctx.Err()
}

// pgPrepare makes the throwaway cluster durable and creates the databases.
func pgPrepare(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("pg: connecting: %w", err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		`ALTER SYSTEM SET fsync = on`,
		`ALTER SYSTEM SET synchronous_commit = on`,
		`ALTER SYSTEM SET full_page_writes = on`,
		`SELECT pg_reload_conf()`,
		`CREATE DATABASE bench_raw`,
		`CREATE DATABASE bench_r1`,
		`CREATE DATABASE bench_r3`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("pg: %s: %w", q, err)
		}
	}
	// The reload is asynchronous; new sessions see it once it is done.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		var fsync string
		err = c.QueryRow(ctx, `SHOW fsync`).Scan(&fsync)
		c.Close(ctx)
		if err != nil {
			return err
		}
		if fsync == "on" {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("pg: fsync is still off after the reload")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func withDB(dsn, db string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	u.Path = "/" + db
	return u.String()
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// pgSet is automator replicas sharing one database, two proxy instances
// and a caller connection to each replica.
type pgSet struct {
	replicas []*automator
	apis     []automatorv1.AutomatorServiceClient
	pids     map[string]int
	order    []string
	next     atomic.Uint64
	// db is the database's name; calls counts the @ping calls that
	// succeeded.
	db    string
	calls atomic.Int64
}

func (b *bench) pgAutomators(ctx context.Context, name, db, dsn string, n int) (*pgSet, error) {
	dir, addr, err := b.initAutomator("automator-"+name, dsn)
	if err != nil {
		return nil, err
	}
	set := &pgSet{db: db, pids: map[string]int{"load generator": os.Getpid()}}
	for i := range n {
		if i > 0 {
			port, err := freePort()
			if err != nil {
				return nil, err
			}
			addr = fmt.Sprintf("127.0.0.1:%d", port)
		}
		rname := fmt.Sprintf("automator-%s-%d", name, i+1)
		a, err := b.serve(rname, dir, addr, fmt.Sprintf("%s-%d", name, i+1))
		if err != nil {
			return nil, err
		}
		cc, api, err := a.caller()
		if err != nil {
			return nil, err
		}
		context.AfterFunc(ctx, func() { cc.Close() })
		set.replicas = append(set.replicas, a)
		set.apis = append(set.apis, api)
		set.pids[rname] = a.proc.pid()
		set.order = append(set.order, rname)
	}
	pr, err := b.createAccount(dir, "bench")
	if err != nil {
		return nil, err
	}
	for i, id := range []string{name + "-a", name + "-b"} {
		a := set.replicas[i%len(set.replicas)]
		p, err := b.startProxy(pr, a.addr, id, instanceConcurrency)
		if err != nil {
			return nil, err
		}
		set.pids["proxy "+id] = p.pid()
		set.order = append(set.order, "proxy "+id)
	}
	set.order = append(set.order, "load generator")
	for range 10 {
		if err := set.call(ctx); err != nil {
			return nil, fmt.Errorf("first @ping: %w", err)
		}
	}
	return set, nil
}

// call is one @ping through the replicas in turn.
func (s *pgSet) call(ctx context.Context) error {
	i := s.next.Add(1) % uint64(len(s.apis))
	_, err := ping(ctx, s.apis[i], "bench", "@ping")
	if err == nil {
		s.calls.Add(1)
	}
	return err
}

// pgXacts is the number of transactions committed and rolled back in
// database db: with the store's single-statement calls, about the number of
// statements.
func pgXacts(ctx context.Context, dsn, db string) (int64, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int64
	err = conn.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1`, db).Scan(&n)
	return n, err
}

// rawPG is the queue's storage cycle written directly in SQL.
type rawPG struct {
	pool *pgxpool.Pool
	cmd  []byte
	res  []byte
}

func newRawPG(ctx context.Context, dsn string) (*rawPG, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns, cfg.MinConns = 16, 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE work (
	id          text        PRIMARY KEY,
	account     text        NOT NULL,
	state       text        NOT NULL,
	sealed_command bytea    NOT NULL,
	queued_at   timestamptz NOT NULL,
	deadline    timestamptz NOT NULL,
	claimed_at  timestamptz,
	instance_id text        NOT NULL DEFAULT '',
	claim_id    text        NOT NULL DEFAULT '',
	finished_at timestamptz,
	sealed_result bytea
);
CREATE INDEX work_queued ON work (account, queued_at, id) WHERE state = 'queued'`); err != nil {
		pool.Close()
		return nil, fmt.Errorf("pg: creating the raw table: %w", err)
	}
	return &rawPG{pool: pool, cmd: randomBytes(80), res: randomBytes(200)}, nil
}

func (r *rawPG) close() { r.pool.Close() }

// cycle: enqueue, claim the oldest queued unit with FOR UPDATE SKIP LOCKED,
// complete it; three committed transactions.
func (r *rawPG) cycle(ctx context.Context) error {
	now := time.Now()
	if _, err := r.pool.Exec(ctx, `INSERT INTO work (id, account, state, sealed_command, queued_at, deadline)
VALUES ($1, 'raw', 'queued', $2, $3, $4)`, randomID("w_"), r.cmd, now, now.Add(5*time.Minute)); err != nil {
		return err
	}
	claimID := randomID("c_")
	var id string
	for id == "" {
		err := r.pool.QueryRow(ctx, `WITH picked AS (
	SELECT id FROM work
	WHERE account = 'raw' AND state = 'queued' AND deadline > $1
	ORDER BY queued_at, id
	LIMIT 1
	FOR UPDATE SKIP LOCKED
)
UPDATE work SET state = 'claimed', instance_id = 'raw', claim_id = $2, claimed_at = $1
FROM picked WHERE work.id = picked.id AND work.state = 'queued'
RETURNING work.id`, time.Now(), claimID).Scan(&id)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
	}
	_, err := r.pool.Exec(ctx, `UPDATE work SET state = 'succeeded', sealed_result = $1, finished_at = $2
WHERE id = $3 AND state = 'claimed' AND claim_id = $4`, r.res, time.Now(), id, claimID)
	return err
}
