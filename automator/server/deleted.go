package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// ErrAccountDeleted: the unit belongs to an account that was deleted, and
// its key with it, so its command and result can never be opened again.
var ErrAccountDeleted = errors.New("the account was deleted and its key destroyed, so the unit's command and result can no longer be read")

// DeletedAccountError returns ErrAccountDeleted, naming the account, for a
// unit whose account is a deleted account's tombstone (store.DeletedAccount);
// nil for any other.
func DeletedAccountError(account string) error {
	if name, ok := store.DeletedAccount(account); ok {
		return fmt.Errorf("account %q: %w", name, ErrAccountDeleted)
	}
	return nil
}

// An account is deleted by `automator account delete`, which writes the
// store directly (store.AccountDelete), in another process than the
// automators that serve it. Its credentials need nothing more: the
// command waits out the automators' cached copies (store.CachedCredentials),
// so its token is refused and its name unknown on every automator once it
// returns. But polls of the account already waiting, and callers waiting
// for its units (now cancelled), learn of it only when woken: each
// automator looks for deletions every SweepInterval and wakes them.

// deletionLookBack is how far back in time the automator looks for
// deletions. A deletion is stamped with the clock of the host that ran
// `automator account delete` (with PostgreSQL, any host that reaches the
// database), which may be behind this automator's by minutes: with a look
// back of 10 minutes, a deletion stamped by a clock 11 minutes behind was
// never seen, and the account's running scripts ran on to their deadline.
// Deletions are rare, so reading those of a day costs nothing.
const deletionLookBack = 24 * time.Hour

// forgetDeletedAfter is how long after it saw a deletion, on its own clock,
// the automator forgets what it still holds under the account's name
// (accountGone).
const forgetDeletedAfter = 10 * time.Minute

// seenDeletion is a deletion watchDeletions acted on, when it saw it, and
// whether it forgot the account since (accountGone).
type seenDeletion struct {
	store.AccountDeletion
	seenAt    time.Time
	gone      bool
	redropped bool // its open polls' and waits' gauges dropped again (dropOpenGauges)
}

// watchDeletions acts on every account deletion it finds, once, until ctx
// is done or the automator shuts down.
func (s *Server) watchDeletions(ctx context.Context) {
	seen := make(map[string]seenDeletion) // by tombstone
	t := time.NewTicker(s.sweepInterval)
	defer t.Stop()
	for {
		s.checkDeletions(ctx, seen)
		select {
		case <-ctx.Done():
			return
		case <-s.shutdown:
			return
		case <-t.C:
		}
	}
}

// checkDeletions reads the recent deletions and acts on those not in seen.
func (s *Server) checkDeletions(ctx context.Context, seen map[string]seenDeletion) {
	now := s.clock.Now()
	since := now.Add(-deletionLookBack)
	mark := s.databaseMark()
	sctx, cancel := s.sweepContext(ctx)
	defer cancel()
	ds, err := s.store.AccountDeletions(sctx, since)
	err = s.unanswered(ctx, sctx, err)
	switch {
	case err != nil && ctx.Err() != nil:
		return
	case err != nil && store.IsUnavailable(err):
		// Every SweepInterval while the database is out of reach.
		s.storeFailed(err)
		s.databaseUnreachable("doing", "looking for deleted accounts", "err", err)
		return
	case err != nil:
		s.storeFailed(err)
		s.log.Warn("looking for deleted accounts", "err", err)
		return
	}
	s.databaseAnswered(mark)
	// Once the store leaves a look at a name unanswered, the rest wait for
	// the next check: each would wait out its bound, and the deletions
	// found meanwhile with them (a re-review).
	answering := true
	for tomb, d := range seen {
		// Dropped again once any poll that slipped past the deletion's
		// wake-up has ended: one that began before the credential cache
		// forgot the account, or a scrape's listing read before the
		// deletion, made the gauges again after they were dropped.
		if answering && !d.gone && !d.redropped && now.Sub(d.seenAt) > 2*s.pollWindow {
			if d.redropped = s.dropOpenGauges(ctx, d.Name); d.redropped {
				seen[tomb] = d
			} else {
				answering = false
			}
		}
		if answering && !d.gone && now.Sub(d.seenAt) > forgetDeletedAfter {
			if d.gone = s.accountGone(ctx, d.Name); d.gone {
				seen[tomb] = d
			} else {
				answering = false
			}
		}
		if d.gone && d.DeletedAt.Before(since) {
			delete(seen, tomb) // no longer read: it cannot be seen again
		}
	}
	for _, d := range ds {
		if _, ok := seen[d.Tombstone]; ok {
			continue
		}
		seen[d.Tombstone] = seenDeletion{AccountDeletion: store.AccountDeletion{Name: d.Name, Tombstone: d.Tombstone, DeletedAt: d.DeletedAt}, seenAt: now}
		s.accountDeleted(ctx, d)
	}
}

// accountGone forgets what this automator still holds under the name of an
// account it saw deleted more than forgetDeletedAfter ago, unless an account of that
// name was created since: its metrics series and what the hub, the queue
// counts and the instances' and runs' records keep per account. Each is
// made again at the name's next use, as after a restart. Without this,
// every account ever deleted kept its entries, and its series in /metrics,
// until the automator restarted.
//
// It reports whether it is done with the name: false when the store did
// not answer, so that the next check tries again (an answer missed once
// kept a deleted account's series until the automator restarted).
func (s *Server) accountGone(ctx context.Context, name string) bool {
	switch again, answered := s.accountAgain(ctx, name); {
	case !answered:
		return false
	case again:
		return true // keep them
	}
	if m, ok := s.metrics.(AccountMetrics); ok {
		m.AccountGone(name)
	}
	s.hub.forgetAccount(name)
	s.queued.forget(name)
	s.seen.forgetAccount(name)
	s.sharedIDs.forgetAccount(name)
	return true
}

// dropOpenGauges drops the gauges of the polls and waits of deleted
// account name open here, all woken by its deletion: at 0 until the rest of
// its series go (accountGone), an alert on an account no proxy polls fired
// for it (a review). They are kept when the name is an account again. It
// reports whether the store answered that.
func (s *Server) dropOpenGauges(ctx context.Context, name string) bool {
	m, ok := s.metrics.(AccountMetrics)
	if !ok {
		return true
	}
	again, answered := s.accountAgain(ctx, name)
	if answered && !again {
		m.AccountDeleted(name)
	}
	return answered
}

// accountAgain reports whether name is an account again (created after
// its deletion), and whether the store answered.
func (s *Server) accountAgain(ctx context.Context, name string) (again, answered bool) {
	gctx, cancel := s.sweepContext(ctx)
	defer cancel()
	switch _, err := s.store.AccountGet(gctx, name); {
	case err == nil:
		return true, true
	case errors.Is(err, store.ErrNotFound):
		return false, true
	}
	return false, false
}

// accountDeleted drops what this automator holds of a deleted account (its
// keys, what listings showed of its units) and wakes whoever waits on it:
// its polls (each looks its token up again, and is refused), and the
// callers of its units that the deletion cancelled.
//
// It also counts those units as finished in its metrics, which no
// automator counted when they ended (the command made the change), under
// the account's name rather than its tombstone's, so that a deletion makes
// no new series. It counts them when it is the only automator on its store
// (with several replicas, each would count them), and only for a deletion
// made since it started: one made before is looked at again after a
// restart, and was counted by the automator running then, if any.
func (s *Server) accountDeleted(ctx context.Context, d store.AccountDeletion) {
	count := s.broadcaster == nil && !d.DeletedAt.Before(s.started)
	store.ForgetCredentials(s.store)
	s.keysMu.Lock()
	delete(s.keys, d.Name)
	s.keysMu.Unlock()
	s.listed.forgetAccount(d.Name)
	s.queued.forget(d.Name)
	s.hub.NotifyAccount(d.Name)
	// Without their sealed blobs: only the ids and the times (and what
	// metrics count: state, account) are used, and a unit's command and
	// result may weigh megabytes.
	p := store.WorkListParams{Account: d.Tombstone, State: store.StateCancelled, Limit: 500, WithoutSealed: true}
	cancelled := 0
	for {
		ws, err := s.listUnits(ctx, p)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("reading the units of a deleted account", "account", d.Name, "err", err)
			}
			break
		}
		for _, w := range ws {
			// The units the deletion cancelled ended at its time
			// (store.AccountDelete); those cancelled before did not.
			if w.FinishedAt.Equal(d.DeletedAt) {
				cancelled++
				if count {
					w.Account = d.Name
					s.metrics.WorkFinished(w)
				}
			}
			s.hub.NotifyDone(w.ID, nil)
		}
		if len(ws) < p.Limit {
			break
		}
		last := ws[len(ws)-1]
		p.BeforeQueuedAt, p.BeforeID = last.QueuedAt, last.ID
	}
	s.dropOpenGauges(ctx, d.Name)
	// A deletion made before this automator started is looked at again
	// after each restart (deletionLookBack): no news then.
	level := slog.LevelInfo
	if d.DeletedAt.Before(s.started) {
		level = slog.LevelDebug
	}
	s.log.Log(ctx, level, "account deleted: its polls and the callers of its cancelled units were woken",
		"account", d.Name, "deleted_at", d.DeletedAt, "units_cancelled", cancelled)
}

// listUnits is one page of a deleted account's units, given up after
// SweepTimeout as the watch's look for deletions is: a listing that gets
// no answer would stop the watch until the operating system gives the
// connection up.
func (s *Server) listUnits(ctx context.Context, p store.WorkListParams) ([]store.Work, error) {
	lctx, cancel := s.sweepContext(ctx)
	defer cancel()
	ws, err := s.store.WorkList(lctx, p)
	return ws, s.unanswered(ctx, lctx, err)
}

// FinishDeletions finishes the deletions of accounts left unfinished
// (store.AccountsBeingDeleted: an `account delete` stopped before it moved
// every ended unit of the account under its tombstone, SQLite only), one
// after the other, as that command run again would (store.AccountDelete
// with Resume): a batch of units per write, with a pause as long as the
// batch took before the next, so the writes of callers and proxies commit
// meanwhile. Each frees the account's name when its last unit has moved.
// It logs a line as it starts finishing one, and one as it ends.
//
// Shutdown, or the end of ctx, stops it between two batches: the units
// moved stay moved, and the rest wait for the next call (serve calls it
// as it starts and every hour). A command moving the same account's units
// at the same moment is no harm: each batch moves units still of the
// account, whoever moves them, and the mover that finds none left frees
// the name.
func (s *Server) FinishDeletions(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.shutdown:
			cancel()
		case <-ctx.Done():
		}
	}()
	ds, err := s.store.AccountsBeingDeleted(ctx)
	if err != nil {
		s.sweepFailed(ctx, "looking for account deletions left unfinished", err)
		return
	}
	for _, d := range ds {
		moving := false
		done, err := s.store.AccountDelete(ctx, store.AccountDeleteParams{Name: d.Name, Resume: true, Now: s.clock.Now(),
			Moving: func(d store.AccountDeletion, left int) {
				moving = true
				s.log.Info("finishing an account deletion left unfinished: moving its units left under its tombstone, in batches",
					"account", d.Name, "tombstone", d.Tombstone, "deleted_at", d.DeletedAt, "units_left", left)
			},
			AuditFinished: func(d store.AccountDeletion) []store.AuditEvent {
				return []store.AuditEvent{store.DeletionFinishedEvent(d, s.clock.Now(), sweeperActor, "")}
			}})
		switch {
		case !moving && (err == nil || errors.Is(err, store.ErrNotFound)):
			// Finished meanwhile, by a command or the purge.
		case !moving && ctx.Err() != nil:
			return // stopped before it started: nothing to say
		case err == nil:
			s.log.Info("finished an account deletion left unfinished: its name is free", "account", d.Name, "units_moved", done.Units)
		case ctx.Err() != nil:
			s.log.Info("stopped finishing an account deletion left unfinished: the automator finishes it when it starts again",
				"account", d.Name, "err", err)
			return
		default:
			s.sweepFailed(ctx, fmt.Sprintf("finishing the deletion of account %q, left unfinished", d.Name), err)
			return
		}
	}
}
