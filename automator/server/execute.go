package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/grpcwire"
	"github.com/opsgate/opsgate/internal/printable"
	"github.com/opsgate/opsgate/internal/scriptenv"
	"github.com/opsgate/opsgate/internal/scriptname"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// AutomatorService serves callers.
type AutomatorService struct {
	automatorv1.UnimplementedAutomatorServiceServer
	s *Server
}

// AutomatorService returns the caller-facing service of s.
func (s *Server) AutomatorService() *AutomatorService { return &AutomatorService{s: s} }

// AccountNamePattern is what an account name may look like.
var AccountNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ExecuteOnProxy queues the command and waits until the unit is terminal.
func (a *AutomatorService) ExecuteOnProxy(ctx context.Context, req *automatorv1.ExecuteRequest) (*automatorv1.WorkStatus, error) {
	s := a.s
	id := store.NewWorkID(time.Now())
	// Subscribed before the unit exists, so its end cannot be missed and
	// the queued unit need not be read again.
	sub := s.hub.WaitDone(id)
	// Nobody outside learns the id before the unit is claimed, and the
	// claim's durable commit makes the unit durable with it: the enqueue
	// need not wait for its own fsync.
	w, err := s.enqueue(ctx, req, "ExecuteOnProxy", id, true)
	if err != nil || w.ID != id {
		sub.Close()
	}
	switch {
	case err != nil:
		return nil, err
	case w.ID != id:
		// An idempotent retry: the unit is an earlier call's.
		return s.wait(ctx, w.ID, nil, nil)
	}
	return s.wait(ctx, id, sub, &w)
}

// Submit queues the command and returns at once.
func (a *AutomatorService) Submit(ctx context.Context, req *automatorv1.ExecuteRequest) (*automatorv1.WorkStatus, error) {
	w, err := a.s.enqueue(ctx, req, "Submit", store.NewWorkID(time.Now()), false)
	if err != nil {
		return nil, err
	}
	return a.s.workStatus(ctx, w)
}

// Wait blocks until the unit is terminal.
func (a *AutomatorService) Wait(ctx context.Context, req *automatorv1.WaitRequest) (*automatorv1.WorkStatus, error) {
	if err := validID("work_id", req.GetWorkId()); err != nil {
		return nil, err
	}
	if _, err := a.s.getAllowedWork(ctx, req.GetWorkId(), "Wait"); err != nil {
		return nil, err
	}
	return a.s.wait(ctx, req.GetWorkId(), nil, nil)
}

// Get returns the unit's status now.
func (a *AutomatorService) Get(ctx context.Context, req *automatorv1.GetRequest) (*automatorv1.WorkStatus, error) {
	if err := validID("work_id", req.GetWorkId()); err != nil {
		return nil, err
	}
	w, err := a.s.getAllowedWork(ctx, req.GetWorkId(), "Get")
	if err != nil {
		return nil, err
	}
	return a.s.workStatus(ctx, w)
}

// cancelEndWait bounds Cancel's wait for the end of a unit past its
// deadline that its expiry left open.
const cancelEndWait = 5 * time.Second

// Cancel ends a queued or claimed unit as cancelled and wakes its claimer's
// poll so the process tree is killed at once. Cancelling a unit that has
// already ended returns its status unchanged; one past its deadline times
// out.
func (a *AutomatorService) Cancel(ctx context.Context, req *automatorv1.CancelRequest) (*automatorv1.WorkStatus, error) {
	s := a.s
	if err := validID("work_id", req.GetWorkId()); err != nil {
		return nil, err
	}
	if _, err := s.getAllowedWork(ctx, req.GetWorkId(), "Cancel"); err != nil {
		return nil, err
	}
	audit := s.event(ctx, store.AuditWorkEnded, "Cancel")
	reason := "cancelled by the caller with API key " + callerFrom(ctx)
	w, err := s.store.WorkCancel(ctx, store.WorkCancelParams{
		ID:     req.GetWorkId(),
		Reason: reason,
		Now:    s.clock.Now(),
		Audit:  &audit,
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, status.Errorf(codes.NotFound, "work %q not found", req.GetWorkId())
	case errors.Is(err, store.ErrNotClaimable) && !w.State.Terminal():
		// Past its deadline: it times out, as its waiting callers are
		// told, whoever cancels it first. The sweep may not have come
		// yet; and the expiry passes over a unit whose row another
		// session holds (a sweep on another replica, its result being
		// written) or may fail, leaving it open: its end is awaited as a
		// waiting caller's is, within cancelEndWait. Answered open, a
		// caller took it for a success (a review: an interrupted exec
		// exited 0 for a unit that never ran).
		wctx, cancel := context.WithTimeout(ctx, cancelEndWait)
		defer cancel()
		st, err := s.wait(wctx, req.GetWorkId(), nil, nil)
		if err != nil && wctx.Err() != nil && ctx.Err() == nil {
			return nil, status.Errorf(codes.Unavailable, "work %q is past its deadline, and its end was not written within %v (another replica holds it, or the database fails): ask again", req.GetWorkId(), cancelEndWait)
		}
		return st, err
	case errors.Is(err, store.ErrNotClaimable):
		if w.State == store.StateCancelled && w.Reason == reason && s.mayBeUnannounced(w) {
			// This caller's cancel made again, its answer lost: the replica
			// that made it may have died before announcing the end, which
			// would leave the unit's waiting callers to its deadline and its
			// script running until its instance's next poll. Announce it again.
			s.emit(ctx, Event{Kind: EventWorkEnded, Account: w.Account, WorkID: w.ID, InstanceID: w.InstanceID, ended: &w})
		}
		return s.workStatus(ctx, w)
	case err != nil:
		return nil, s.internal(ctx, "cancelling work", err)
	}
	// Waiting callers return; a claimer's pending poll is woken and told to
	// kill the unit's process tree (Poll's cancelled list).
	s.emit(ctx, Event{Kind: EventWorkEnded, Account: w.Account, WorkID: w.ID, InstanceID: w.InstanceID, ended: &w})
	s.metrics.WorkFinished(w)
	s.log.Info("work cancelled", "work_id", w.ID, "account", w.Account, "caller", callerFrom(ctx), "claimed_by", w.InstanceID)
	return s.workStatus(ctx, w)
}

// ListInstances lists the instances that have polled for an account.
func (a *AutomatorService) ListInstances(ctx context.Context, req *automatorv1.ListInstancesRequest) (*automatorv1.ListInstancesResponse, error) {
	s := a.s
	if _, err := s.accountOrStatus(ctx, req.GetAccount(), "ListInstances"); err != nil {
		return nil, err
	}
	list, err := s.store.InstanceList(ctx, req.GetAccount())
	if err != nil {
		return nil, s.internal(ctx, "listing instances", err)
	}
	// Online as in the listings and the dashboard (store.AccountStatsParams):
	// a last poll at or after this, which did not say it was stopping and
	// was not refused.
	since := s.clock.Now().Add(-InstanceOnlineWithin(s.pollWindow))
	resp := &automatorv1.ListInstancesResponse{}
	for _, in := range list {
		resp.Instances = append(resp.Instances, &automatorv1.Instance{
			InstanceId:    in.InstanceID,
			Hostname:      in.Hostname,
			Version:       in.Version,
			LastPollAt:    timestamppb.New(in.LastPollAt),
			InFlight:      int32(in.InFlight),
			Online:        StatusOfInstance(in, since) == InstanceOnline,
			Stopped:       in.Stopped,
			Refused:       in.Refused(),
			RefusedKeyIds: in.RefusedKeyIDs,
			RefusedCause:  refusedCause(in),
		})
	}
	return resp, nil
}

// accountOrStatus reads the account a caller's method names. A key scoped
// to other accounts is refused before the read, so that it learns nothing
// of which accounts exist.
func (s *Server) accountOrStatus(ctx context.Context, name, method string) (store.Account, error) {
	if !AccountNamePattern.MatchString(name) {
		return store.Account{}, status.Errorf(codes.InvalidArgument, "account %s is not a valid account name (%s)", printable.Quote(name), AccountNamePattern)
	}
	if err := s.allow(ctx, name, method); err != nil {
		return store.Account{}, err
	}
	acc, err := s.store.AccountGet(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return store.Account{}, accountNotFound(name)
	}
	if err != nil {
		return store.Account{}, s.internal(ctx, "reading account", err)
	}
	return acc, nil
}

// accountNotFound is the answer to a call naming an account that does not
// exist, or no longer does.
func accountNotFound(name string) error {
	return status.Errorf(codes.NotFound, "account %q not found", name)
}

// enqueue validates, seals and stores a new unit with the given id, then
// wakes one poller. With an idempotency key already used on the account
// (within the retention window) it stores nothing and returns the unit the
// key made. syncLater: see store.WorkEnqueueParams.SyncLater.
func (s *Server) enqueue(ctx context.Context, req *automatorv1.ExecuteRequest, method, id string, syncLater bool) (store.Work, error) {
	acc, err := s.accountOrStatus(ctx, req.GetAccount(), method)
	if err != nil {
		return store.Work{}, err
	}
	if err := s.checkCommand(req.GetCommand()); err != nil {
		return store.Work{}, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := checkIdempotencyKey(req.GetIdempotencyKey()); err != nil {
		return store.Work{}, status.Error(codes.InvalidArgument, err.Error())
	}
	timeout := s.defaultTimeout
	if t := req.GetTimeout(); t != nil {
		// AsDuration would read a malformed one as some other duration
		// (nanos past a second carried over, seconds and nanos of
		// different signs summed, 10,000 years clamped to 292).
		if t.CheckValid() != nil {
			sec, ns := t.GetSeconds(), t.GetNanos()
			if ns <= -1e9 || ns >= 1e9 || (sec > 0 && ns < 0) || (sec < 0 && ns > 0) {
				return store.Work{}, status.Errorf(codes.InvalidArgument, "timeout {seconds: %d, nanos: %d} is not a valid duration: nanos must be under a second and of the sign of seconds", sec, ns)
			}
			return store.Work{}, status.Errorf(codes.InvalidArgument, "timeout of %d seconds is outside (0, %v]", sec, s.maxTimeout)
		}
		timeout = t.AsDuration()
		if timeout <= 0 || timeout > s.maxTimeout {
			return store.Work{}, status.Errorf(codes.InvalidArgument, "timeout %v is outside (0, %v]", timeout, s.maxTimeout)
		}
	}
	key, err := s.currentKey(ctx, acc)
	if errors.Is(err, store.ErrNotFound) {
		// Deleted since acc was read (a cached copy, kept up to a second).
		return store.Work{}, accountNotFound(acc.Name)
	}
	if errors.Is(err, crypto.ErrOpen) {
		// Its row altered, or the database another automator's: a
		// caller is told what, not an internal error (a review); the
		// log says it too, bounded, as for any internal error.
		_ = s.internal(ctx, "opening the account key", err)
		return store.Work{}, status.Errorf(codes.DataLoss, "account %q: its key does not open with this automator's master key (its row altered in the database, or the database another automator's); nothing was queued", acc.Name)
	}
	if err != nil {
		return store.Work{}, s.internal(ctx, "opening the account key", err)
	}
	plain, err := proto.Marshal(req.GetCommand())
	if err != nil {
		return store.Work{}, s.internal(ctx, "encoding the command", err)
	}
	sealed, err := crypto.Seal(key, acc.Name, id, crypto.DirCommand, plain)
	if err != nil {
		return store.Work{}, s.internal(ctx, "sealing the command", err)
	}
	sealedScript, err := s.sealScript(id, req.GetCommand().GetScript())
	if err != nil {
		return store.Work{}, s.internal(ctx, "sealing the script name for the audit log", err)
	}
	audit := s.event(ctx, store.AuditWorkQueued, method)
	audit.Account, audit.WorkID, audit.SealedScript = acc.Name, id, sealedScript
	now := s.clock.Now()
	params := store.WorkEnqueueParams{
		ID:               id,
		Account:          acc.Name,
		KeyID:            key.ID,
		SealedCommand:    sealed,
		Now:              now,
		Deadline:         now.Add(timeout),
		IdempotencyKey:   req.GetIdempotencyKey(),
		IdempotencySince: now.Add(-s.retention),
		// Written with the unit, in its transaction: no unit without it.
		Audit:     &audit,
		SyncLater: syncLater,
	}
	// Nothing claimable is queued and a poll waits: the unit is stored as
	// claimed by its instance and handed to it, without a second
	// transaction or a wake-up in between. Such a unit never joins the
	// queue, so the queue's cap is not checked for it: on an idle
	// automator that check would often read the store (a count is trusted
	// for queueCountFor), a cold read on the way of every sporadic call.
	// A poll authenticated with a token withdrawn since is passed over: acc
	// holds the current token, read no earlier than a rotation that
	// returned before this call (store.CachedCredentials; pollauth.go).
	to := s.hub.reserve(acc.Name, now, acc.TokenHash, len(sealed))
	if to != nil {
		params.ClaimFor = &store.ClaimRef{InstanceID: to.instance, ClaimID: newID("c_"), ClaimPoll: to.poll}
	} else if err := s.checkQueue(ctx, params, method); err != nil {
		return store.Work{}, err
	}
	mark := s.writeMark()
	w, err := s.store.WorkEnqueue(ctx, params)
	if err == nil {
		s.wrote(mark)
	}
	if to != nil && err != nil {
		s.hub.release(to, len(sealed))
		if mayBeStored(err) {
			// The unit may be stored all the same (with PostgreSQL, an
			// answer lost after the commit), as the claim of a poll that
			// is not answered with it and whose proxy will never say so:
			// if it is, it fails now rather than at its deadline. In the
			// background: with the database unreachable this write waits
			// as long as the failed one did, and the caller need not.
			go s.failUnsent(ctx, false, "storing it failed, so its poll was not answered with it",
				store.Work{ID: id, Account: acc.Name, InstanceID: to.instance, ClaimID: params.ClaimFor.ClaimID, Deadline: params.Deadline})
		}
	}
	if errors.Is(err, store.ErrDuplicate) {
		// A retry of a submit whose answer was lost (or a second caller with
		// the same key): the unit exists; nothing is queued or woken.
		if err := s.sameCommand(ctx, w, req.GetCommand()); err != nil {
			return store.Work{}, err
		}
		dup := s.event(ctx, store.AuditWorkDuplicate, method+": idempotency key already used; returned its unit")
		dup.Account, dup.WorkID = w.Account, w.ID
		if dup.SealedScript, err = s.sealScript(w.ID, req.GetCommand().GetScript()); err == nil {
			s.record(ctx, dup)
		}
		s.log.Debug("idempotency key already used: returning its unit", "work_id", w.ID, "account", acc.Name, "caller", callerFrom(ctx))
		return w, nil
	}
	if errors.Is(err, store.ErrNotFound) {
		// Deleted since acc was read: the answer a call made after the
		// deletion gets.
		return store.Work{}, accountNotFound(acc.Name)
	}
	if err != nil {
		return store.Work{}, s.internal(ctx, "queueing work", err)
	}
	s.metrics.WorkQueued(acc.Name)
	s.kickSweeper(w.Deadline)
	s.log.Debug("work queued", "work_id", id, "account", acc.Name, "caller", callerFrom(ctx), "deadline", w.Deadline, "handed_to", w.InstanceID)
	if to == nil {
		s.emit(ctx, Event{Kind: EventWorkQueued, Account: acc.Name})
	} else if !s.hub.hand(to, w) {
		s.failUnsent(ctx, false, "its poll ended while it was stored", w)
	}
	return w, nil
}

// refused reports whether a failed WorkEnqueue surely stored nothing: the
// store refused it (the account is unknown, the id taken, the key used
// before, the disk full). Any other failure may have come after the
// commit.
// mayBeStored tells whether a unit whose enqueue failed with err may be
// stored all the same: not when the store refused it, nor when another
// program held the database locked (SQLite rolled the write back; the
// caller is told nothing was stored). Otherwise an answer lost after the
// commit leaves it open. Trying to fail one that cannot be stored only
// logged, while the lock lasted, units that never existed (a review).
func mayBeStored(err error) bool { return !refused(err) && !store.IsLocked(err) }

func refused(err error) bool {
	return errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrExists) ||
		errors.Is(err, store.ErrDuplicate) || errors.Is(err, store.ErrStorageFull)
}

// maxIdempotencyKey bounds an idempotency key, in bytes.
const maxIdempotencyKey = 128

// checkIdempotencyKey accepts an empty key (none) or up to 128 printable
// ASCII characters, so a key can travel in logs and URLs unescaped.
func checkIdempotencyKey(k string) error {
	if len(k) > maxIdempotencyKey {
		return fmt.Errorf("idempotency_key is %d bytes, more than the limit of %d", len(k), maxIdempotencyKey)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return fmt.Errorf("idempotency_key may hold printable ASCII characters only (no spaces), found byte 0x%02x at %d", k[i], i)
		}
	}
	return nil
}

// sameCommand refuses to reuse an idempotency key for another command: the
// caller would otherwise get the outcome of a command it did not send.
func (s *Server) sameCommand(ctx context.Context, w store.Work, cmd *automatorv1.Command) error {
	prev, err := s.openCommand(ctx, w)
	if errors.Is(err, ErrCommandLost) {
		// Which command it was is gone with its row: the caller gets the
		// unit, ended, rather than a second run of what may have run.
		return nil
	}
	if err != nil {
		return s.internal(ctx, "opening a stored command", err)
	}
	if !proto.Equal(prev, cmd) {
		return status.Errorf(codes.InvalidArgument, "idempotency_key %q was already used on account %q for another command (work %s); use a new key for a new command", w.IdempotencyKey, w.Account, w.ID)
	}
	return nil
}

// maxOneArg is the most bytes one argument, or one variable as NAME=VALUE,
// may hold: Linux passes a program at most 128 KiB in one, its NUL
// included (MAX_ARG_STRLEN), and windows at most 32,767 characters in the
// whole command line. limits.max_args_bytes and max_env_bytes allow more
// than that in one, and a unit queued with it would fail on any proxy
// (a review).
const maxOneArg = 128<<10 - 1

// checkCommand enforces the size limits, and that every part of the command
// can reach a process, with one precise message.
func (s *Server) checkCommand(c *automatorv1.Command) error {
	l := s.limits
	if c == nil || c.GetScript() == "" {
		return errors.New("command.script is required")
	}
	if len(c.GetScript()) > l.MaxScriptName {
		return fmt.Errorf("command.script is %d bytes, more than the limit of %d (limits.max_script_name)", len(c.GetScript()), l.MaxScriptName)
	}
	if len(c.GetArgs()) > l.MaxArgs {
		return fmt.Errorf("command.args has %d arguments, more than the limit of %d (limits.max_args)", len(c.GetArgs()), l.MaxArgs)
	}
	n := 0
	for i, a := range c.GetArgs() {
		n += len(a)
		if len(a) > maxOneArg {
			return fmt.Errorf("command.args[%d] is %d bytes, more than one argument may be (%d: no Linux proxy passes more in one, nor a windows one in all); pass large data on stdin", i, len(a), maxOneArg)
		}
	}
	if n > l.MaxArgsBytes {
		return fmt.Errorf("command.args total %d bytes, more than the limit of %d (limits.max_args_bytes)", n, l.MaxArgsBytes)
	}
	if len(c.GetEnv()) > l.MaxEnv {
		return fmt.Errorf("command.env has %d variables, more than the limit of %d (limits.max_env)", len(c.GetEnv()), l.MaxEnv)
	}
	// In order, so that the one named is the same on every try.
	names := slices.Sorted(maps.Keys(c.GetEnv()))
	n = 0
	for _, k := range names {
		v := c.GetEnv()[k]
		n += len(k) + len(v)
		if len(k)+1+len(v) > maxOneArg {
			return fmt.Errorf("command.env %q is %d bytes with its name, more than one variable may be (%d: no Linux proxy passes more in one, nor a windows one in all); pass large data on stdin", k, len(k)+1+len(v), maxOneArg)
		}
	}
	if n > l.MaxEnvBytes {
		return fmt.Errorf("command.env totals %d bytes, more than the limit of %d (limits.max_env_bytes)", n, l.MaxEnvBytes)
	}
	// An environment block and an argument vector are NUL-terminated
	// strings of NAME=value: what does not fit one reaches no process on
	// any proxy, which would report the unit failed.
	if strings.ContainsRune(c.GetScript(), 0) {
		return errors.New("command.script holds a NUL byte, which no file name can")
	}
	// No proxy runs it (proxy/runner refuses it again): refused here, it
	// takes no proxy's slot and its caller hears why at once.
	if p := scriptname.Problem(c.GetScript()); p != "" && !strings.HasPrefix(c.GetScript(), "@") {
		return fmt.Errorf("command.script %s is refused: %s; a script is a plain file name inside the proxy's scripts directory", printable.Quote(c.GetScript()), p)
	}
	// A built-in's name (@ping) is printable too: one that is not shows
	// as another in listings, and no proxy has it (a review).
	if err := printable.Check(c.GetScript()); err != nil && strings.HasPrefix(c.GetScript(), "@") {
		return fmt.Errorf("command.script: the built-in name %w", err)
	}
	for i, a := range c.GetArgs() {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("command.args[%d] holds a NUL byte, which no process argument can", i)
		}
	}
	for _, k := range names {
		if !scriptenv.ValidName(k) {
			return fmt.Errorf("command.env: variable name %s is not valid: a name is not empty and holds no '=' or NUL byte", printable.Quote(k))
		}
		if strings.ContainsRune(c.GetEnv()[k], 0) {
			return fmt.Errorf("command.env: the value of %s holds a NUL byte, which no environment variable can", printable.Quote(k))
		}
		if err := scriptenv.Refused(k); err != nil {
			return fmt.Errorf("command.env: %w", err)
		}
	}
	if len(c.GetStdin()) > l.MaxStdin {
		return fmt.Errorf("command.stdin is %d bytes, more than the limit of %d (limits.max_stdin)", len(c.GetStdin()), l.MaxStdin)
	}
	return nil
}

func (s *Server) getWork(ctx context.Context, id string) (store.Work, error) {
	w, err := s.store.WorkGet(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return store.Work{}, status.Errorf(codes.NotFound, "work %q not found", id)
	}
	if err != nil {
		return store.Work{}, s.internal(ctx, "reading work", err)
	}
	return w, nil
}

// wait blocks until unit id is terminal. It reads the store once per
// wake-up: when the unit ends (not even then when it ended on this
// automator, which hands the ended unit over), and at the deadline (when it
// expires the unit itself if the sweeper has not yet), so the caller gets
// its timeout at the deadline in every case. With other replicas, also
// every waitRecheck: an end announced by another replica may have been
// lost. sub and known, when given, are a subscription to the unit's end
// made before known was read.
func (s *Server) wait(ctx context.Context, id string, sub *doneSub, known *store.Work) (*automatorv1.WorkStatus, error) {
	if sub == nil {
		sub, known = s.hub.WaitDone(id), nil
	}
	defer func() { sub.Close() }() // sub changes on every wake-up
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	fired := false // the timer fired and has not been re-armed
	var recheck <-chan time.Time
	if s.broadcaster != nil {
		t := time.NewTicker(s.waitRecheck)
		defer t.Stop()
		recheck = t.C
	}
	for {
		var w store.Work
		if known != nil {
			w, known = *known, nil
		} else {
			var err error
			if w, err = s.getWork(ctx, id); err != nil {
				return nil, err
			}
		}
		if w.State.Terminal() {
			return s.workStatus(ctx, w)
		}
		switch {
		case timer == nil:
			timer = time.NewTimer(w.Deadline.Sub(s.clock.Now()))
			// Counted from the first look that finds the unit not
			// ended, until the call returns.
			defer s.waitMetrics.WaitOpened(w.Account)()
		case fired:
			// Not ended at its deadline: another replica may hold it, or
			// the store failed; look again soon. Or the clock stepped
			// back, and the deadline is still ahead on it: wait for it, as
			// the sweeper does, rather than look every SweepInterval.
			timer.Reset(max(w.Deadline.Sub(s.clock.Now()), s.sweepInterval))
			fired = false
		}
		select {
		case <-sub.c:
			known = sub.ended
			sub = s.hub.WaitDone(id)
		case <-recheck: // read it again
		case <-timer.C:
			_, err := s.expireDue(ctx, id)
			switch {
			case store.IsDamaged(err):
				// It cannot be timed out, and would be waited for until
				// the database is repaired, with nothing said: the
				// caller is told why at its deadline.
				return nil, status.Errorf(codes.DataLoss, "the automator's database is damaged: timing work %q out at its deadline failed, and fails until its operator repairs the database", id)
			case store.IsStorageFull(err) && !s.clock.Now().Before(w.Deadline.Add(s.sweepInterval)):
				// Its end is timed_out, written or not: no claim and no
				// result is taken past the deadline. The caller hears
				// so now (guarantee 2), not once space is freed, which
				// may be hours. A SweepInterval past the deadline, so
				// that a replica whose clock is a little behind this one
				// has taken its last result by then, and read again
				// now, so that such a result is not missed.
				if cur, err := s.getWork(ctx, id); err == nil && !cur.State.Terminal() {
					return s.workStatus(ctx, timedOutUnwritten(cur))
				}
			}
			fired = true
		case <-s.shutdown:
			return nil, status.Errorf(codes.Unavailable, "automator shutting down; wait for work %q again", id)
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
}

// timedOutUnwritten is w, open past its deadline, as WorkExpire would end
// it, for a caller to hear while a full disk keeps that from being
// written (the sweeper writes it once space is freed).
func timedOutUnwritten(w store.Work) store.Work {
	reason := store.UnclaimedReason
	if w.State == store.StateClaimed {
		reason = store.ExpireReason(w, store.AccountInstances{})
	}
	w.State, w.FinishedAt = store.StateTimedOut, w.Deadline
	w.Reason = reason + "; the automator's database is out of disk space: it records the unit timed_out once space is freed"
	return w
}

// workStatus turns a stored unit into what callers see, opening the result.
func (s *Server) workStatus(ctx context.Context, w store.Work) (*automatorv1.WorkStatus, error) {
	st := &automatorv1.WorkStatus{
		WorkId:     w.ID,
		Account:    w.Account,
		State:      stateToProto(w.State),
		Reason:     w.Reason,
		QueuedAt:   timestamppb.New(w.QueuedAt),
		Deadline:   timestamppb.New(w.Deadline),
		InstanceId: w.InstanceID,
	}
	if !w.ClaimedAt.IsZero() {
		st.ClaimedAt = timestamppb.New(w.ClaimedAt)
	}
	if !w.FinishedAt.IsZero() {
		st.FinishedAt = timestamppb.New(w.FinishedAt)
	}
	if !w.State.Terminal() {
		st.Remaining = durationpb.New(max(0, w.Deadline.Sub(s.clock.Now())))
	}
	var r *automatorv1.Result
	if len(w.SealedResult) > 0 {
		var err error
		r, err = s.openResult(ctx, w, w.SealedResult)
		if errors.Is(err, ErrAccountDeleted) {
			// The unit has ended for good: its status, all but the
			// result, goes with the refusal as its detail, so that a
			// caller waiting for it (work wait) can say how it ended.
			refused := status.Newf(codes.FailedPrecondition, "work %s: %v", w.ID, err)
			if withStatus, derr := refused.WithDetails(st); derr == nil {
				refused = withStatus
			}
			return nil, refused.Err()
		}
		if errors.Is(err, crypto.ErrOpen) {
			// Altered in the database (or copied there from another
			// unit): the unit has ended, its result cannot be read. Its
			// status goes with the refusal, as above; the plaintext was
			// never had.
			s.log.Error("a stored result does not open: altered in the database?", "work_id", w.ID, "account", w.Account, "err", err)
			refused := status.Newf(codes.DataLoss, "work %s: its stored result does not open (altered in the database?); the unit is %s", w.ID, w.State)
			if withStatus, derr := refused.WithDetails(st); derr == nil {
				refused = withStatus
			}
			return nil, refused.Err()
		}
		if err != nil {
			return nil, s.internal(ctx, "opening a stored result", err)
		}
		st.Result = r
		if w.State == store.StateFailed && r.GetFailure() != "" {
			st.Reason = PrintableFailure(r.GetFailure())
		}
	}
	if err := contradicted(w, r != nil, r.GetFailure()); err != nil {
		// As a result that does not open: the unit has ended, and how is
		// not known.
		s.log.Error("a unit recorded succeeded holds no result that says so: altered in the database?", "work_id", w.ID, "account", w.Account, "err", err)
		st.Result = nil
		refused := status.Newf(codes.DataLoss, "work %s: %v", w.ID, err)
		if withStatus, derr := refused.WithDetails(st); derr == nil {
			refused = withStatus
		}
		return nil, refused.Err()
	}
	return st, nil
}

func stateToProto(s store.State) automatorv1.State {
	switch s {
	case store.StateQueued:
		return automatorv1.State_STATE_QUEUED
	case store.StateClaimed:
		return automatorv1.State_STATE_CLAIMED
	case store.StateSucceeded:
		return automatorv1.State_STATE_SUCCEEDED
	case store.StateFailed:
		return automatorv1.State_STATE_FAILED
	case store.StateTimedOut:
		return automatorv1.State_STATE_TIMED_OUT
	case store.StateCancelled:
		return automatorv1.State_STATE_CANCELLED
	}
	return automatorv1.State_STATE_UNSPECIFIED
}

// getAllowedWork reads a unit the caller's API key may see: one of its
// accounts'. A unit of another account is answered as an unknown id is,
// in the same words (the refusal is logged and audited all the same): a
// key that came by an id of another account's unit learns nothing from
// it, not even that the unit, or its account, exists.
func (s *Server) getAllowedWork(ctx context.Context, id, method string) (store.Work, error) {
	w, err := s.getWork(ctx, id)
	if err != nil {
		return store.Work{}, err
	}
	if err := s.allow(ctx, w.Account, method); err != nil {
		return store.Work{}, status.Errorf(codes.NotFound, "work %q not found", id)
	}
	return w, nil
}

// checkQueue refuses a new unit, with ResourceExhausted, while the account
// has MaxQueuedPerAccount units queued: its proxies are down or slower than
// its callers, and more would only wait to time out. Other accounts are
// served as before. The count is read before the enqueue, so concurrent
// submits may overshoot the cap by their number; it bounds a flood, not a
// single unit.
//
// Counting costs up to the cap (a backlog of 10,000 units is 10,000 index
// entries), so while an account is far below it the count is not read on
// every enqueue: a count below half the cap, plus the units queued here
// since, is trusted for queueCountFor. A unit handed straight to a waiting
// poll is not checked (enqueue): it is claimed as it is stored. Nor is a
// retry whose idempotency key names a unit already stored (p).
func (s *Server) checkQueue(ctx context.Context, p store.WorkEnqueueParams, method string) error {
	account := p.Account
	max := s.limits.MaxQueuedPerAccount
	now := s.clock.Now()
	if s.queued.below(account, max/2, now) {
		return nil
	}
	n, err := s.store.WorkQueuedCount(ctx, account, max)
	if err != nil {
		return s.internal(ctx, "counting queued units", err)
	}
	if n < max {
		s.queued.counted(account, n+1, now) // this unit too
		return nil
	}
	if p.IdempotencyKey != "" {
		// A retry of a submit whose unit was stored (its answer lost) is
		// not a new unit: WorkEnqueue answers it with that unit.
		if _, err := s.store.WorkByIdempotencyKey(ctx, account, p.IdempotencyKey, p.IdempotencySince); err == nil {
			return nil
		}
	}
	s.refusalMetrics.WorkRefused(account)
	s.queueFullLog.Log("account queue full: unit refused", "account", account, "queued", n, "caller", callerFrom(ctx))
	e := s.event(ctx, store.AuditWorkRefused, fmt.Sprintf("%s: queue full (as many units queued as its limit, %d)", method, max))
	e.Account = account
	s.record(ctx, e)
	return retryLater(grpcwire.ReasonQueueFull, map[string]string{"account": account}, queueFullRetry, "account %q has as many units queued as its limit allows (%d, limits.max_queued_per_account): no instance claims them fast enough; check the account's proxies, or submit again later", account, n)
}

// queueFullRetry is when a unit refused for a full queue is worth
// submitting again (its RetryInfo, Retry-After over HTTP). No one can
// tell when the account's proxies will have claimed enough units (or
// their deadlines passed), so it is a pace, not a promise: while the queue
// is at its cap, every new unit counts it afresh (no count is trusted at
// or above half the cap), so a submit a second later already sees what
// the proxies claimed meanwhile, and each refusal costs that count.
const queueFullRetry = time.Second

// queueCountFor is how long a count of an account's queued units is trusted
// (checkQueue).
const queueCountFor = time.Second

// queuedCounts remembers, per account, a recent count of queued units plus
// the units queued here since: an upper bound on the queue of this replica's
// making (claims only shorten it).
type queuedCounts struct {
	mu sync.Mutex
	m  map[string]queuedCount
}

type queuedCount struct {
	n  int
	at time.Time
}

// below reports whether the account's queue is surely below limit (counted
// less than queueCountFor ago, and below limit with the units queued since),
// counting the unit about to be queued when it is.
func (q *queuedCounts) below(account string, limit int, now time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	c, ok := q.m[account]
	if !ok || c.n >= limit || now.Sub(c.at) >= queueCountFor || now.Before(c.at) {
		return false
	}
	c.n++
	q.m[account] = c
	return true
}

// forget drops the account's count: the account was deleted (a count per
// account ever seen would only grow with accounts made and deleted). Both
// the deletion (accountDeleted) and, a while after it, accountGone
// call it.
func (q *queuedCounts) forget(account string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.m, account)
}

// counted records a count just read.
func (q *queuedCounts) counted(account string, n int, now time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.m == nil {
		q.m = make(map[string]queuedCount)
	}
	q.m[account] = queuedCount{n: n, at: now}
}

// refusedCause is in's Instance.refused_cause.
func refusedCause(in store.Instance) automatorv1.RefusedCause {
	switch in.RefusedCause() {
	case store.RefusedTokenExpired:
		return automatorv1.RefusedCause_REFUSED_CAUSE_TOKEN_EXPIRED
	case store.RefusedWrongKey:
		return automatorv1.RefusedCause_REFUSED_CAUSE_WRONG_KEY
	case store.RefusedNoUsableKey:
		return automatorv1.RefusedCause_REFUSED_CAUSE_NO_USABLE_KEY
	}
	return automatorv1.RefusedCause_REFUSED_CAUSE_UNSPECIFIED
}
