//go:build unix

// Unix only: the CPU per unit comes from getrusage.

package sqlitestore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// lifecycleBacklog is how many finished units (each with its two audit
// records) the benchmark's database holds before it starts: nothing ever
// deletes a unit, so an automator under load writes into large b-trees, and
// an empty database would flatter every index.
var lifecycleBacklog = flag.Int("lifecycle.backlog", 50000, "finished units in the database before BenchmarkUnitLifecycle starts")

// BenchmarkUnitLifecycle drives a unit's whole life through the store as the
// server does (execute.go, poll.go, complete.go): WorkEnqueue with its audit
// record and SyncLater (ExecuteOnProxy), WorkClaim, WorkComplete with its
// audit record. Each caller has an account of its own, so its claim takes
// its own unit. Besides the time per unit it reports the process's CPU per
// unit (user + system, from getrusage), the figure that counts on a machine
// whose cores the automator shares, and the commits per unit (group commit).
func BenchmarkUnitLifecycle(b *testing.B) {
	for _, callers := range []int{1, 64} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			benchLifecycle(b, callers)
		})
	}
}

func benchLifecycle(b *testing.B, callers int) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "automator.db"))
	if err != nil {
		b.Fatalf("Open: %v", err)
	}
	defer s.Close()
	start := time.Now()
	for i := range callers {
		if _, err := s.AccountCreate(ctx, store.AccountCreateParams{Name: fmt.Sprintf("acct-%02d", i), TokenHash: []byte(fmt.Sprintf("token-%02d", i)), KeyID: 1, SealedKey: randBytes(60), Now: start}); err != nil {
			b.Fatalf("AccountCreate: %v", err)
		}
	}
	if err := fillBacklog(ctx, s, *lifecycleBacklog, callers, start); err != nil {
		b.Fatalf("filling the backlog: %v", err)
	}

	var next atomic.Int64
	var failed atomic.Pointer[error]
	commits := s.w.commits.Load()
	runtime.GC()
	cpu := processCPU()
	b.ResetTimer()
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			account := fmt.Sprintf("acct-%02d", i)
			instance := fmt.Sprintf("i_%s", hex.EncodeToString(randBytes(16)))
			for next.Add(1) <= int64(b.N) {
				if err := lifecycle(ctx, s, account, instance); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	used := processCPU() - cpu
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	b.ReportMetric(float64(used.Nanoseconds())/float64(b.N), "cpu-ns/unit")
	b.ReportMetric(float64(s.w.commits.Load()-commits)/float64(b.N), "commits/unit")
}

// lifecycle enqueues, claims and completes one unit with the parameters the
// server passes.
func lifecycle(ctx context.Context, s *Store, account, instance string) error {
	now := time.Now()
	id := store.NewWorkID(now)
	queued := store.AuditEvent{At: now, Kind: store.AuditWorkQueued, Actor: "apikey:k_0123456789abcdef", Source: "127.0.0.1", Detail: "ExecuteOnProxy",
		Account: account, WorkID: id, SealedScript: randBytes(48)}
	if _, err := s.WorkEnqueue(ctx, store.WorkEnqueueParams{
		ID: id, Account: account, KeyID: 1, SealedCommand: randBytes(180),
		Now: now, Deadline: now.Add(5 * time.Minute), IdempotencySince: now.Add(-24 * time.Hour),
		Audit: &queued, SyncLater: true,
	}); err != nil {
		return err
	}
	claimed, err := s.WorkClaim(ctx, store.WorkClaimParams{Account: account, InstanceID: instance, Max: 1,
		ClaimIDs: []string{"c_" + hex.EncodeToString(randBytes(16))}, Now: time.Now()})
	if err != nil {
		return err
	}
	if len(claimed) != 1 || claimed[0].ID != id {
		return fmt.Errorf("claim of %s returned %d units", id, len(claimed))
	}
	ended := store.AuditEvent{At: time.Now(), Kind: store.AuditWorkEnded, Actor: "account:" + account, Source: "127.0.0.1", Detail: "Complete"}
	_, err = s.WorkComplete(ctx, store.WorkCompleteParams{ID: id, ClaimID: claimed[0].ClaimID, Account: account,
		State: store.StateSucceeded, SealedResult: randBytes(120), Now: time.Now(), Audit: &ended})
	return err
}

// fillBacklog writes n finished units spread over the accounts, with two
// audit records each, in one transaction. Their ids are in time order, as
// store.NewWorkID makes them.
func fillBacklog(ctx context.Context, s *Store, n, accounts int, before time.Time) error {
	if n <= 0 {
		return nil
	}
	return s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		at := toNanos(before.Add(-time.Hour))
		if _, err := tx.ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
INSERT INTO work (id, account, state, key_id, sealed_command, queued_at, deadline, claimed_at, instance_id, claim_id, finished_at, sealed_result)
SELECT printf('w_%012x', (? + i * 1000) / 1000000) || lower(hex(randomblob(10))), printf('acct-%02d', i % ?), 'succeeded', 1, randomblob(180),
	? + i * 1000, ? + i * 1000 + 300000000000, ? + i * 1000 + 1000, 'i_backlog', 'c_' || lower(hex(randomblob(16))), ? + i * 1000 + 2000, randomblob(120)
FROM n`, n, at, accounts, at, at, at, at); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO audit (at, kind, actor, source, account, work_id, instance_id, outcome, sealed_script, detail)
SELECT queued_at, 'work.queued', 'apikey:k_0123456789abcdef', '127.0.0.1', account, id, '', '', randomblob(48), 'ExecuteOnProxy' FROM work
UNION ALL
SELECT finished_at, 'work.ended', 'account:' || account, '127.0.0.1', account, id, instance_id, state, NULL, 'Complete' FROM work
ORDER BY 1`)
		return err
	})
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// processCPU is the CPU time (user and system) the process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
