package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore"
	"github.com/opsgate/opsgate/internal/clihelp"
	"github.com/opsgate/opsgate/version"
)

// Replica heartbeats: every replica refreshes its row this often, and a
// replica is listed as alive while its last heartbeat is younger than
// replicaAliveWithin (three missed beats).
const (
	heartbeatInterval  = 5 * time.Second
	replicaAliveWithin = 3 * heartbeatInterval
)

// replicaForgetAfter is how long the heartbeat of a replica that stopped,
// or was not heard from, stays listed by `automator replicas`: serve
// deletes it past that, so replicas removed for good leave the listing,
// while one stopped for a long weekend is still shown.
const replicaForgetAfter = 7 * 24 * time.Hour

// storeFailure logs a store call of serve's own that failed
// (server.Server.LogStoreFailure).
type storeFailure func(doing string, err error, attrs ...any)

// forgetReplicas deletes the heartbeats of the replicas not heard from
// since replicaForgetAfter before now; a failure is told to failed.
func forgetReplicas(ctx context.Context, st store.Store, now time.Time, failed storeFailure, log *slog.Logger) {
	n, err := st.ReplicaPurge(ctx, store.ReplicaPurgeParams{SeenBefore: now.Add(-replicaForgetAfter)})
	if err != nil && ctx.Err() == nil {
		failed("deleting the heartbeats of replicas not heard from for a week", err)
	}
	if n > 0 {
		log.Info("deleted the heartbeats of replicas not heard from for a week", "count", n)
	}
}

// forgetInstances deletes the records of the instances that have not
// polled since store.InstanceForgetAfter before now; a failure is told to
// failed.
func forgetInstances(ctx context.Context, st store.Store, now time.Time, failed storeFailure, log *slog.Logger) {
	n, err := st.InstancePurge(ctx, store.InstancePurgeParams{PolledBefore: now.Add(-store.InstanceForgetAfter)})
	if err != nil && ctx.Err() == nil {
		failed(fmt.Sprintf("deleting the records of instances that have not polled for %d days", store.InstanceForgetDays), err)
	}
	if n > 0 {
		log.Info(fmt.Sprintf("deleted the records of instances that have not polled for %d days", store.InstanceForgetDays), "count", n)
	}
}

// defaultReplicaID names a replica that was given no --replica-id (nor
// replica_id in automator.yaml): the host name and a short hash of the data
// directory's absolute path. It stays the same across restarts, and two
// replicas on one host differ as long as their data directories do.
func defaultReplicaID(dir string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "automator"
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	sum := sha256.Sum256([]byte(abs))
	return host + "-" + hex.EncodeToString(sum[:4])
}

// holdReplicaID keeps replicaID to this process while it serves, on
// PostgreSQL (pgstore.ReplicaHold): a second automator started with the id
// of one that runs, on this database, is refused, naming the id and how to
// choose another. A replica restarted after it stopped or died takes its id
// again at once. SQLite needs no hold: one automator serves it. The
// returned function gives the id up.
func holdReplicaID(ctx context.Context, st store.Store, replicaID string, log *slog.Logger) (release func(), err error) {
	pg, ok := store.Uncached(st).(*pgstore.Store)
	if !ok {
		return func() {}, nil
	}
	lost := func(err error) {
		log.Error("another automator took this replica's id while this one's connection to the database was lost; give one of them another id (--replica-id, or replica_id: in "+config.FileConfig+")", "err", err)
	}
	h, err := pg.HoldReplicaID(ctx, replicaID, lost)
	if errors.Is(err, pgstore.ErrReplicaIDInUse) {
		return nil, fmt.Errorf("replica id %q is in use by another running automator on this database%s; give this one another id with --replica-id or replica_id: in %s (by default it is the host name and a hash of the data directory's path), or stop the other first",
			replicaID, describeHolder(ctx, st, replicaID), config.FileConfig)
	}
	if err != nil {
		return nil, err
	}
	return h.Release, nil
}

// describeHolder says where the replica holding replicaID runs, from its
// heartbeat, or nothing when that cannot be read.
func describeHolder(ctx context.Context, st store.Store, replicaID string) string {
	list, err := st.ReplicaList(ctx)
	if err != nil {
		return ""
	}
	for _, r := range list {
		if r.ReplicaID == replicaID {
			return fmt.Sprintf(" (host %s, started %s, last heartbeat %s ago)", r.Hostname,
				r.StartedAt.UTC().Format(time.RFC3339), max(time.Since(r.LastSeen), 0).Round(time.Second))
		}
	}
	return ""
}

// startHeartbeat records the replica's first heartbeat before it returns
// (so a replica that serves is listed), then one every heartbeatInterval
// until ctx is done; the returned channel closes when it has stopped. A
// failed heartbeat is logged and retried at the next beat: it only makes
// the replica look dead in listings.
func startHeartbeat(ctx context.Context, st store.Store, replicaID string, failed storeFailure, log *slog.Logger) <-chan struct{} {
	host, _ := os.Hostname()
	p := store.ReplicaHeartbeatParams{
		ReplicaID: replicaID,
		Hostname:  host,
		Version:   version.Version,
		StartedAt: time.Now(),
	}
	beat := heartbeat(ctx, st, p, failed, log)
	beat()
	return every(ctx, heartbeatInterval, beat)
}

// heartbeat returns the function that records one heartbeat of p. A
// failure is logged as a warning when the one before succeeded (told to
// failed instead when the database is locked by another program, out of
// disk space or damaged, whose lines say what to do), and at debug level
// while they go on failing (a database out of reach fails every beat);
// the first success after them says so.
func heartbeat(ctx context.Context, st store.Store, p store.ReplicaHeartbeatParams, failed storeFailure, log *slog.Logger) func() {
	failing := false // beats run one at a time
	return func() {
		p.Now = time.Now()
		err := st.ReplicaHeartbeat(ctx, p)
		switch {
		case err != nil && ctx.Err() != nil:
		case err != nil && !failing:
			failing = true
			const doing = "recording this replica's heartbeat: `automator replicas` shows it as not alive while this lasts; further failures are logged at debug level"
			if store.IsLocked(err) || store.IsStorageFull(err) || store.IsDamaged(err) {
				failed(doing, err)
			} else {
				log.Warn(doing, "err", err)
			}
		case err != nil:
			log.Debug("recording this replica's heartbeat", "err", err)
		case failing:
			failing = false
			log.Info("recording this replica's heartbeat again")
		}
	}
}

// every calls fn every d, in a goroutine of its own, until ctx is done;
// the returned channel closes when it has stopped.
func every(ctx context.Context, d time.Duration, fn func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				fn()
			}
		}
	}()
	return done
}

// cmdReplicas lists the automator replicas sharing the data directory's
// database, from their heartbeats.
func cmdReplicas(ctx context.Context, args []string, env Env) error {
	fs := newFlags("replicas", env)
	dir := fs.String("data-dir", "", "the automator's data directory")
	db := dbFlag(fs)
	if err := clihelp.ParseNoArgs(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(*dir, *db)
	if err != nil {
		return err
	}
	st, err := openStore(ctx, *dir, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	list, err := st.ReplicaList(ctx)
	if err != nil {
		return err
	}
	var held *heldIDs
	if pg, ok := store.Uncached(st).(*pgstore.Store); ok {
		// One read of pg_locks: which ids running automators hold.
		ids, err := pg.ReplicaIDsHeld(ctx)
		if err != nil {
			return err
		}
		held = &heldIDs{ids: map[string]bool{}}
		for _, id := range ids {
			if id == "" {
				held.unnamed++
			} else {
				held.ids[id] = true
			}
		}
	}
	return writeReplicas(env, list, held, time.Now())
}

// heldIDs are the replica ids running automators hold on PostgreSQL
// (pgstore.ReplicaIDsHeld); unnamed counts those no heartbeat names.
type heldIDs struct {
	ids     map[string]bool
	unnamed int
}

// writeReplicas prints the replicas' heartbeats; with held (PostgreSQL),
// a HOLDS ID column says whether a running automator holds each id: the
// lock ends with the process's session, at once when it is killed, while
// a process paused or frozen keeps it with its heartbeats stopped. An error
// writing to stdout (a full disk) is returned: the command fails.
func writeReplicas(env Env, list []store.Replica, held *heldIDs, now time.Time) error {
	if len(list) == 0 {
		if _, err := fmt.Fprintln(env.Stdout, "no replica has sent a heartbeat to this database yet"); err != nil {
			return err
		}
	}
	if len(list) > 0 {
		w := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
		holds := ""
		if held != nil {
			holds = "HOLDS ID\t"
		}
		fmt.Fprintln(w, "REPLICA ID\tHOST\tVERSION\tSTARTED\tLAST SEEN\t"+holds+"ALIVE")
		for _, r := range list {
			alive := "no"
			if now.Sub(r.LastSeen) < replicaAliveWithin {
				alive = "yes"
			}
			holds := ""
			if held != nil {
				holds = "no\t"
				if held.ids[r.ReplicaID] {
					holds = "yes\t"
				}
			}
			ago := max(now.Sub(r.LastSeen), 0).Round(time.Second)
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s (%s ago)\t%s%s\n", r.ReplicaID, r.Hostname, r.Version,
				r.StartedAt.UTC().Format(time.RFC3339), r.LastSeen.UTC().Format(time.RFC3339), ago, holds, alive)
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if held != nil && held.unnamed > 0 {
		if _, err := fmt.Fprintf(env.Stdout, "and %d replica id(s) held by a running automator that no heartbeat names (not written yet, or deleted after a week without one)\n", held.unnamed); err != nil {
			return err
		}
	}
	return nil
}
