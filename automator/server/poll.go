package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/printable"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// knownEmptyFor is how long an account's empty queue, or an instance's
// running units, are trusted without looking again when nothing was
// announced since (hub.knownEmpty, hub.runningKnown).
const knownEmptyFor = time.Second

// Bounds on what one poll may carry.
const (
	maxUnitsPerPoll = 256
	maxRunning      = 4096
	maxIDLen        = 128
	maxHostnameLen  = 255 // a DNS name is at most 253 bytes
	maxVersionLen   = 128
)

// A poll's answer is one gRPC message, bounded (8 MiB in `automator
// serve`), and its claims cannot be put back once made (guarantee 1): a
// claim whose units' sealed commands would not fit must not be made, or
// they would all fail unsent. So the units of one answer carry at most
// claimBytes of sealed commands (the first unit whatever its size: any
// one command fits, limits.max_stdin and the others see to it). Of these,
// units handed to a poll while its own claim is under way (hub.reserve)
// take at most fillBytes, none past it; the claim the rest. The rest of
// the message, the claims' ids and times and up to maxRunning cancelled
// ids, fits in the remainder.
const (
	claimBytes = 7 << 20
	fillBytes  = 512 << 10
)

// ProxyService serves proxy instances.
type ProxyService struct {
	automatorv1.UnimplementedProxyServiceServer
	s *Server
}

// ProxyService returns the proxy-facing service of s.
func (s *Server) ProxyService() *ProxyService { return &ProxyService{s: s} }

// Poll claims up to max_units units for the calling instance, waiting up to
// the poll window for one to be queued. It also reports which of the units
// the instance runs have ended meanwhile (cancelled, timed out).
func (p *ProxyService) Poll(ctx context.Context, req *automatorv1.PollRequest) (*automatorv1.PollResponse, error) {
	s := p.s
	account := accountFrom(ctx)
	if err := validPoll(req); err != nil {
		return nil, err
	}
	// The keys the instance holds decide how its claims are sealed
	// (reseal.go); one that holds no usable key claims nothing.
	ring, refused, wrongKey, err := s.instanceRing(ctx, account, req.GetInstanceId(), req.GetKeyIds(), req.GetKeyChecks())
	if err != nil && !refused {
		return nil, err
	}
	newRun := s.noteRun(ctx, account, req.GetInstanceId(), req.GetHostname(), req.GetRunId())
	seen := pollRecord(req, account, tokenFrom(ctx).created, s.clock.Now())
	ps := pollSeen{run: req.GetRunId(), seq: req.GetPollSeq(), newRun: newRun}
	if refused {
		// Recorded as refused, with the key ids it holds: listings, the
		// dashboard and the reason of a unit no instance claimed tell the
		// cause, rather than show an instance that polls as gone. The
		// proxy is told why all the same if it cannot be recorded.
		seen.RefusedKeyIDs = req.GetKeyIds()
		seen.WrongKey = wrongKey
		if rerr := s.instanceSeen(ctx, seen, ps); rerr != nil && !errors.Is(rerr, store.ErrTooManyInstances) {
			_ = s.internal(ctx, "recording the instance's refused poll", rerr)
		}
		return nil, err
	}
	return p.poll(ctx, req, account, ring, seen, ps)
}

// validPoll checks what a poll says of its instance and itself, before
// anything of it is used or recorded: a poll refused for an expired token
// (tokenExpiredPoll) is checked as an accepted one is.
func validPoll(req *automatorv1.PollRequest) error {
	if err := validID("instance_id", req.GetInstanceId()); err != nil {
		return err
	}
	max := int(req.GetMaxUnits())
	if max < 0 || max > maxUnitsPerPoll {
		return status.Errorf(codes.InvalidArgument, "max_units %d is outside [0, %d]", max, maxUnitsPerPoll)
	}
	if len(req.GetRunning()) > maxRunning {
		return status.Errorf(codes.InvalidArgument, "running lists %d units, more than %d", len(req.GetRunning()), maxRunning)
	}
	// The ids below are looked up and stored, and with PostgreSQL a NUL
	// byte in any text fails the statement it is in, and with it the
	// batch of other instances' polls written together: none comes from
	// a proxy of ours (work ids, and run ids of base32).
	for i, id := range req.GetRunning() {
		if len(id) > maxIDLen {
			return status.Errorf(codes.InvalidArgument, "running[%d] is longer than %d bytes", i, maxIDLen)
		}
		if err := plainText(fmt.Sprintf("running[%d]", i), id); err != nil {
			return err
		}
	}
	// Each unit once: a proxy runs a unit once. Listed again, it was told
	// ended again, and kept in the hub's look as often (a review).
	if running := req.GetRunning(); len(running) > 1 {
		listed := make(map[string]int, len(running))
		for i, id := range running {
			if j, ok := listed[id]; ok {
				return status.Errorf(codes.InvalidArgument, "running[%d] lists unit %s again (running[%d])", i, printable.Quote(id), j)
			}
			listed[id] = i
		}
	}
	if len(req.GetRunId()) > maxIDLen {
		return status.Errorf(codes.InvalidArgument, "run_id is longer than %d bytes", maxIDLen)
	}
	if err := plainText("run_id", req.GetRunId()); err != nil {
		return err
	}
	if req.GetPollSeq() > math.MaxInt64 {
		return status.Errorf(codes.InvalidArgument, "poll_seq %d is above %d", req.GetPollSeq(), int64(math.MaxInt64))
	}
	if from := req.GetLostFrom(); from != 0 && (from >= req.GetPollSeq() || req.GetRunId() == "") {
		return status.Errorf(codes.InvalidArgument, "lost_from %d needs a run_id and a poll_seq above it (poll_seq %d)", from, req.GetPollSeq())
	}
	// Both are stored with the instance and shown in listings.
	if len(req.GetHostname()) > maxHostnameLen {
		return status.Errorf(codes.InvalidArgument, "hostname is longer than %d bytes", maxHostnameLen)
	}
	if len(req.GetVersion()) > maxVersionLen {
		return status.Errorf(codes.InvalidArgument, "version is longer than %d bytes", maxVersionLen)
	}
	if err := plainText("hostname", req.GetHostname()); err != nil {
		return err
	}
	if err := plainText("version", req.GetVersion()); err != nil {
		return err
	}
	return nil
}

// pollRecord is the record of poll req of an instance of account (created
// at created), at now.
func pollRecord(req *automatorv1.PollRequest, account string, created, now time.Time) store.InstanceSeenParams {
	return store.InstanceSeenParams{
		Account:    account,
		InstanceID: req.GetInstanceId(),
		Hostname:   req.GetHostname(),
		Version:    req.GetVersion(),
		Running:    len(req.GetRunning()),
		Stopping:   req.GetStopping(),
		Run:        req.GetRunId(),
		PollSeq:    int64(req.GetPollSeq()), // at most MaxInt64 (validPoll)
		// Not recorded under an account created again under its name.
		AccountCreatedAt: created,
		Now:              now,
	}
}

// poll is Poll of an instance whose poll is accepted, recorded as seen.
func (p *ProxyService) poll(ctx context.Context, req *automatorv1.PollRequest, account string, ring *keyRing, seen store.InstanceSeenParams, ps pollSeen) (*automatorv1.PollResponse, error) {
	s := p.s
	max := int(req.GetMaxUnits())
	window := s.pollWindow
	if w := req.GetWait(); w != nil && w.AsDuration() >= 0 && w.AsDuration() < window {
		window = w.AsDuration()
	}
	window = onTick(s.clock.Now(), jitter(window))
	if until := tokenFrom(ctx).until; !until.IsZero() {
		// A previous token: the poll ends with its window, and the next
		// one is refused.
		if left := until.Sub(s.clock.Now()); left < window {
			window = left
		}
		if window < 0 {
			window = 0
		}
	}
	defer s.metrics.PollOpened(account)()

	if err := s.instanceSeen(ctx, seen, ps); errors.Is(err, store.ErrTooManyInstances) {
		max := s.limits.MaxInstancesPerAccount
		s.instanceCapLog.Log("poll of a new instance refused: its account holds as many instance records as it may", "account", account, "instance_id", req.GetInstanceId(), "max", max)
		return nil, status.Errorf(codes.ResourceExhausted, "instance %q is not recorded, and its polls are refused: account %q holds %d instance records, the most it may (limits.max_instances_per_account in automator.yaml), and all of them are of instances online (a new instance takes the place of one offline); raise it", req.GetInstanceId(), account, max)
	} else if err != nil {
		return nil, s.internal(ctx, "recording the instance's poll", err)
	}

	// Register before the first look, so an enqueue between an empty claim
	// and the wait still wakes this poll.
	keyIDs := req.GetKeyIds()
	tok := newPollToken(tokenFrom(ctx))
	// The keys are those last read, not ring: a rotation made while the
	// poll waits applies to it (latestRing); so does a token rotation
	// (pollauth.go). Called under the hub's lock, which keysMu and tok's
	// lock nest in.
	cp := store.ClaimPoll{Run: req.GetRunId()}
	if cp.Run != "" {
		cp.Poll = int64(req.GetPollSeq())
	}
	w := s.hub.poller(account, req.GetInstanceId(), cp, max, func(now time.Time, token []byte) bool {
		return ctx.Err() == nil && tok.takes(now, token) && (ring == nil || s.latestRing(account, ring).anyUsable(keyIDs, now))
	}, s.connSilence(ctx))
	defer func() {
		s.failUnsent(ctx, false, "its poll ended before it was answered", w.Close(s.clock.Now())...)
	}()
	if from := req.GetLostFrom(); from != 0 {
		// After the poller superseded any poll of the run still waiting
		// here, which then claims nothing more (and fails what it claimed
		// after this look: tryOnce).
		s.failLost(ctx, account, req.GetInstanceId(), cp.Run, int64(from), cp.Poll-1)
		if s.broadcaster != nil {
			// Another replica may hold a poll of the run until it hears of
			// this one (EventRunPolled), and claim units for it meanwhile.
			// The proxy said it, so the audit records name its account
			// and source, as the first look's do: the call's values, not
			// its end.
			go s.failLostAgain(context.WithoutCancel(ctx), account, req.GetInstanceId(), cp.Run, int64(from), cp.Poll-1)
		}
	}
	if run := req.GetRunId(); run != "" && s.broadcaster != nil {
		if pr, ok := peer.FromContext(ctx); ok && s.hub.newConnection(account, req.GetInstanceId(), run, pr.Addr.String()) {
			s.publish(Event{Kind: EventRunPolled, Account: account, InstanceID: req.GetInstanceId(), RunID: run, PollSeq: cp.Poll})
		}
	}
	timer := time.NewTimer(window)
	defer timer.Stop()
	windowEnds := timer.C
	if hook := s.testHookWindow; hook != nil {
		windowEnds = hook(account, req.GetInstanceId(), window)
	}
	var retell *time.Timer
	defer func() {
		if retell != nil {
			retell.Stop()
		}
	}()
	var handed []store.Work
	woken := false
	for {
		resp, declined, err := p.tryOnce(ctx, account, req, seen.Now, max, ring, w, tok, handed)
		if woken && declined {
			// Woken for a unit it cannot take: another poll may. (It is
			// waiting again, and not woken: it takes nothing.)
			s.hub.NotifyWork(account, 1, s.clock.Now())
		}
		if err != nil {
			return nil, err
		}
		if len(resp.Claims) > 0 || len(resp.Cancelled) > 0 || w.isSuperseded() {
			// (A superseded poll's connection is dead: it ends.)
			resp.Wait = durationpb.New(window)
			return resp, nil
		}
		w.park()
		if retell != nil {
			retell.Stop()
			retell = nil
		}
		if at, ok := s.hub.retellAt(account, req.GetInstanceId(), req.GetRunId(), req.GetRunning(), knownEmptyFor); ok {
			// It lists a unit its process was told ended a moment ago,
			// which that look stood in for: once the look is no longer
			// fresh, it is woken to look again and tell it again.
			retell = time.AfterFunc(at.Sub(s.clock.Now()), w.wake)
		}
		select {
		case <-w.c:
			woken = true
			if handed = w.take(); len(handed) > 0 || w.isSuperseded() {
				continue // hub.reserve checked its token; tryOnce ends a superseded poll
			}
			// About to claim: its token may have been withdrawn or
			// rotated while it waited. Out of the waiting list, it
			// cannot be woken again meanwhile; it re-arms before it
			// claims, so nothing queued meanwhile is missed.
			if err := s.recheckToken(ctx, account, tok); err != nil {
				s.hub.NotifyWork(account, 1, s.clock.Now()) // the wake-up, passed on
				if ended, _ := s.endedOf(ctx, account, req.GetRunning()); len(ended) > 0 {
					// Its account was deleted, say, and the units it
					// runs cancelled with it: they are told, so that
					// the proxy kills their scripts. Its next poll is
					// refused.
					return &automatorv1.PollResponse{Cancelled: ended, Wait: durationpb.New(window)}, nil
				}
				return nil, err
			}
			w.rearm()
			continue
		case <-windowEnds:
		case <-s.shutdown:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		// Units being stored as this poll's claims as its window ends or
		// the automator stops are still delivered.
		w.leave(ctx)
		resp = &automatorv1.PollResponse{}
		if handed = w.take(); len(handed) > 0 {
			if resp, _, err = p.tryOnce(ctx, account, req, seen.Now, max, ring, w, tok, handed); err != nil {
				return nil, err
			}
		}
		resp.Wait = durationpb.New(window)
		return resp, nil
	}
}

// tryOnce reports ended running units and claims what it can, or answers
// with the units handed to the poll (stored as its claims: hub.reserve
// checked that the poll could take them) when there are some. received is
// when the poll's handler began, reg the poll's registration in the hub,
// tok its token. declined: the poll may not claim (its caller left, its
// token or keys expired), so it did not.
func (p *ProxyService) tryOnce(ctx context.Context, account string, req *automatorv1.PollRequest, received time.Time, max int, ring *keyRing, reg *poller, tok *pollToken, handed []store.Work) (*automatorv1.PollResponse, bool, error) {
	s := p.s
	ring = s.latestRing(account, ring) // a rotation since the poll began applies
	resp := &automatorv1.PollResponse{}
	if looked := s.clock.Now(); len(req.GetRunning()) > 0 && !s.hub.runningKnown(account, req.GetInstanceId(), req.GetRunId(), looked, knownEmptyFor) {
		cut := s.hub.cutSeen(account)
		ended, err := s.endedOf(ctx, account, req.GetRunning())
		if err != nil {
			s.failUnsent(ctx, false, "its poll failed", handed...)
			return nil, false, s.internal(ctx, "reading states of running units", err)
		}
		s.hub.checkedRunning(account, req.GetInstanceId(), req.GetRunId(), cut, looked, ended)
		resp.Cancelled = ended
	}
	now := s.clock.Now()
	if ctx.Err() != nil {
		// The caller left: nothing can be sent, and a poll that already
		// left must not claim.
		s.failUnsent(ctx, false, "its poll ended before it was answered", handed...)
		return resp, true, nil
	}
	claimed := handed
	// The first fromQueue units of claimed were taken from the queue by
	// this poll's claim; the others were handed to it as they were queued
	// (hub.reserve).
	fromQueue := 0
	if len(handed) == 0 {
		switch {
		case max == 0:
			return resp, false, nil
		case reg.isSuperseded():
			return resp, true, nil // its connection is dead
		case tok.expired(now):
			return resp, true, nil // it claims nothing more
		case ring != nil && !ring.anyUsable(req.GetKeyIds(), now):
			// The instance's last usable key expired while it waited: it
			// claims nothing, and its next poll is told why.
			return resp, true, nil
		}
		// Most polls of an idle account find nothing: when another poll of
		// the account just found nothing and no unit was queued since,
		// neither would this one.
		if s.hub.knownEmpty(account, now, knownEmptyFor) {
			return resp, false, nil
		}
		// When the account's queue drains as fast as it fills, units
		// queued while this claim is on its way are handed to this poll
		// (in up to half its slots, the claim asking for the rest), not
		// queued behind the claim for the next poll to claim again.
		ask, fill, budget := max, 0, claimBytes
		if max >= 2 && s.hub.drainedRecently(account, now, knownEmptyFor) {
			fill = max / 2
			ask = max - fill
			budget -= fillBytes
			reg.parkWhileClaiming(fill)
		}
		ids := make([]string, ask)
		for i := range ids {
			ids[i] = newID("c_")
		}
		work := s.hub.workSeen(account)
		var err error
		mark := s.databaseMark()
		claimed, err = s.store.WorkClaim(ctx, store.WorkClaimParams{
			Account:    account,
			InstanceID: req.GetInstanceId(),
			Max:        ask,
			ClaimIDs:   ids,
			Now:        now,
			ClaimPoll:  reg.poll,
			Expect:     s.hub.expectWork(account),
			MaxBytes:   budget,
		})
		var more []store.Work
		if fill > 0 {
			more = reg.claimDone(ctx)
		}
		if err != nil {
			s.failUnsent(ctx, false, "its poll failed", more...)
			return nil, false, s.internal(ctx, "claiming work", err)
		}
		s.databaseAnswered(mark)
		ended := s.clock.Now()
		// Fewer than asked, and not for want of room in the answer: the
		// queue is drained.
		drained := len(claimed) < ask && !s.mayBeCut(claimed, budget)
		s.hub.claimEnded(account, drained, ended)
		if drained {
			// Fewer than asked: the claim took every claimable unit, so
			// the next poll of the account (this instance's, right after
			// it starts these) need not look until more is queued.
			s.hub.foundEmpty(account, work, now)
		} else {
			// This poll took all it could carry; there may be more for
			// others.
			s.hub.NotifyWork(account, 1, ended)
		}
		// The units queued before the claim come first.
		fromQueue = len(claimed)
		claimed = append(claimed, more...)
		now = ended
		if ctx.Err() != nil {
			// The caller left while the claim was under way, and the
			// store ran it to its end: its units are the instance's, which
			// will never receive them. Say so rather than answer a poll
			// nobody reads.
			s.failUnsent(ctx, false, "its poll ended while its claim was under way", claimed...)
			return resp, false, nil
		}
	}
	if len(claimed) > 0 && reg.poll.Poll != 0 && reg.isSuperseded() {
		// A newer poll of its run came (numbered: newer, not a stale one
		// registered late), after its proxy stopped waiting for this one:
		// the answer would never be read. (The newer poll's lost_from
		// looked at what was claimed before it came.)
		s.failUnsent(ctx, false, "a newer poll of its proxy process came while it was being claimed", claimed...)
		return resp, true, nil
	}
	for i, w := range claimed {
		resp.Claims = append(resp.Claims, &automatorv1.Claim{
			WorkId:        w.ID,
			ClaimId:       w.ClaimID,
			Account:       w.Account,
			SealedCommand: s.sealedFor(ctx, ring, req.GetKeyIds(), w, now),
			Remaining:     durationpb.New(claimRemaining(w, now)),
		})
		s.metrics.WorkClaimed(w.Account, now.Sub(w.QueuedAt))
		s.log.Debug("work claimed", "work_id", w.ID, "account", account, "instance_id", w.InstanceID, "handed", i >= fromQueue)
	}
	if len(resp.Claims) > 0 {
		// The proxy counts the claims' remaining times from its sending of
		// the poll plus this, never from the answer's arrival, later by the
		// request's way here and the answer's back: a script ran on past
		// its unit's deadline by the answer's transit (a review: 2 s over
		// a slow link).
		held := now.Sub(received)
		if held < 0 {
			held = 0 // the automator's clock stepped back (a fake one in tests)
		}
		resp.Held = durationpb.New(held)
	}
	return resp, false, nil
}

// mayBeCut reports whether a claim that took fewer units than it asked
// for may have stopped at its byte budget rather than at the end of the
// queue: whether a command as large as the limits allow would not have
// fitted after those claimed. Then the queue is not known to be empty.
func (s *Server) mayBeCut(claimed []store.Work, budget int) bool {
	n := 0
	for _, w := range claimed {
		n += len(w.SealedCommand)
	}
	l := s.limits
	// Each argument and variable costs a few bytes of encoding; sealing
	// and the script name's field, less than 1 KiB.
	largest := l.MaxScriptName + l.MaxArgsBytes + 4*l.MaxArgs + l.MaxEnvBytes + 8*l.MaxEnv + l.MaxStdin + 1024
	return n+largest > budget
}

// claimRemaining is the time a claim carries: until the unit's deadline
// on the automator's clock, and never more than its timeout. When that
// clock steps back between the queueing and the claim (an NTP step), the
// deadline seems further away than the caller's whole timeout; the script
// still runs no longer than the timeout.
func claimRemaining(w store.Work, now time.Time) time.Duration {
	return min(w.Deadline.Sub(now), w.Deadline.Sub(w.QueuedAt))
}

// failLost ends, as failed, the units still claimed for the polls of a
// proxy process (instance and run) numbered from to to: the proxy said that
// their answers never reached it (PollRequest.lost_from). A failure to
// read or end them is logged: they then time out at their deadline.
func (s *Server) failLost(ctx context.Context, account, instance, run string, from, to int64) {
	ws, err := s.store.WorkClaimedByPolls(ctx, store.WorkClaimedByPollsParams{
		Account: account, InstanceID: instance, Run: run, FromPoll: from, ToPoll: to,
	})
	if err != nil {
		s.storeFailed(err)
		attrs := []any{"account", account, "instance_id", instance, "polls", fmt.Sprintf("%d-%d", from, to), "err", err}
		if store.IsDamaged(err) {
			s.damaged("reading the units claimed for polls whose answers a proxy did not receive", attrs...)
			return
		}
		s.log.Warn("reading the units claimed for polls whose answers a proxy did not receive; they time out at their deadline", attrs...)
		return
	}
	why := "the answer of the poll it was claimed for never reached the proxy (its connection died unseen, or the answer came too late)"
	if from != to {
		why = "the answers of the polls it was claimed for never reached the proxy (its connection died unseen, or they came too late)"
	}
	s.failUnsent(ctx, true, why, ws...)
}

// lostLookAgain is how long after a poll's lost_from the automator looks
// once more, with other replicas, for units claimed for the lost polls: a
// replica holding one of them claims nothing more once it has heard of the
// newer poll, which takes a NOTIFY's delivery, milliseconds.
const lostLookAgain = 2 * time.Second

// failLostAgain is failLost once more, lostLookAgain later (unless the
// automator stops first). ctx carries the values of the poll that said
// so (its account and peer, for the audit records), and is not cancelled.
func (s *Server) failLostAgain(ctx context.Context, account, instance, run string, from, to int64) {
	t := time.NewTimer(lostLookAgain)
	defer t.Stop()
	select {
	case <-t.C:
		s.failLost(ctx, account, instance, run, from, to)
	case <-s.shutdown:
	}
}

// failUnsent ends, as failed, units claimed for a poll whose answer never
// reached its proxy (why says how): their scripts never ran and never will,
// since a claim is sent only in that answer. The caller learns it at once,
// and that the call may be repeated, rather than at the deadline. Nothing is
// handed to anyone else (guarantee 1). proxySaid: the proxy said so
// (lost_from), and is the audit record's actor; otherwise the automator
// knows it (its poll ended, or was superseded, before the answer was sent).
// A unit that ended meanwhile is left as it is.
func (s *Server) failUnsent(ctx context.Context, proxySaid bool, why string, ws ...store.Work) {
	if len(ws) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	// A unit claimed in the store but never put in an answer, where a
	// claim is counted, is counted here; those the proxy says it lost
	// were counted in their answer. One whose enqueue failed (no ClaimedAt:
	// it may not be stored) counts only if it is found and failed now.
	claimed := func(w store.Work) {
		if !proxySaid && !w.ClaimedAt.IsZero() {
			s.metrics.WorkClaimed(w.Account, w.ClaimedAt.Sub(w.QueuedAt))
		}
	}
	for _, w := range ws {
		// Concurrently, so the store commits them together.
		wg.Go(func() {
			audit := store.AuditEvent{At: s.clock.Now(), Kind: store.AuditWorkEnded, Actor: sweeperActor, Detail: "never delivered: " + why}
			if proxySaid {
				audit = s.event(ctx, store.AuditWorkEnded, "never delivered: "+why)
			}
			done, err := s.store.WorkComplete(ctx, store.WorkCompleteParams{
				ID:      w.ID,
				ClaimID: w.ClaimID,
				Account: w.Account,
				State:   store.StateFailed,
				Reason:  fmt.Sprintf("its claim never reached instance %s: %s; the script did not run", w.InstanceID, why),
				Now:     s.clock.Now(),
				Audit:   &audit,
			})
			switch {
			case err == nil:
				s.emit(ctx, Event{Kind: EventWorkEnded, Account: done.Account, WorkID: done.ID, ended: &done})
				claimed(done)
				s.metrics.WorkFinished(done)
				s.metrics.WorkUndelivered(done.Account)
				s.log.Warn("unit claimed for a poll whose answer never reached its proxy: failed",
					"work_id", w.ID, "account", w.Account, "instance_id", w.InstanceID, "why", why)
			case errors.Is(err, store.ErrNotClaimable):
				// Ended meanwhile: cancelled, past its deadline.
				claimed(w)
			case errors.Is(err, store.ErrClaimMismatch), errors.Is(err, store.ErrNotFound):
				// Not this claim's, or not stored.
			default:
				claimed(w)
				s.unfailedLog.Log("unit claimed for a poll whose answer never reached its proxy: could not fail it; if it is stored (a unit whose storing failed may not be), it times out at its deadline",
					"work_id", w.ID, "account", w.Account, "instance_id", w.InstanceID, "why", why, "deadline", w.Deadline, "err", err)
			}
		})
	}
	wg.Wait()
}

func validID(field, v string) error {
	if v == "" {
		return status.Errorf(codes.InvalidArgument, "%s is required", field)
	}
	if len(v) > maxIDLen {
		return status.Errorf(codes.InvalidArgument, "%s is longer than %d bytes", field, maxIDLen)
	}
	return plainText(field, v)
}

// plainText refuses a text a proxy reports that operators are shown as it
// came (in listings, in their terminals, on the dashboard) when it holds a
// character that is not shown as it is: a control character (C0, DEL and
// C1: an escape sequence, or a line break or tab that would forge a row), a
// format character (a zero-width space, which makes an instance id that is
// listed as another's, or a bidi override, which reverses what follows), a
// line or paragraph separator, or a space other than U+0020. It is the
// rule API key names and script names follow (printable.FirstNotShown).
func plainText(field, v string) error {
	if i := printable.FirstNotShown(v); i >= 0 {
		r, _ := utf8.DecodeRuneInString(v[i:])
		what := "an invisible, format or separator character"
		if unicode.IsControl(r) {
			what = "a control character"
		}
		return status.Errorf(codes.InvalidArgument, "%s contains %U, %s: only printable characters are shown as they are", field, r, what)
	}
	return nil
}

// PrintableFailure is a failure a proxy reports, as operators are shown it
// (by the API, the CLI and the dashboard): a line break, a tab or another
// white space becomes a space, any other character that is not shown as it
// is (an escape sequence's control characters, a bidi override, a
// zero-width space) U+FFFD. The failure itself is not refused: the unit
// would then stay claimed until its deadline, and an older proxy's message
// may hold a line break. It is prose, not a name: a character that prints
// as nothing but is no format character (a variation selector after an
// emoji) stays.
func PrintableFailure(v string) string {
	if strings.IndexFunc(v, unprintable) < 0 {
		return v
	}
	return strings.Map(func(r rune) rune {
		switch {
		case !unprintable(r):
			return r
		case unicode.IsSpace(r):
			return ' '
		}
		return '\uFFFD'
	}, v)
}

// unprintable reports whether r is neither printable (unicode.IsPrint) nor
// the ASCII space.
func unprintable(r rune) bool { return !unicode.IsPrint(r) }

// endedOf returns the ids among running whose units have ended (cancelled
// or timed out: the instance kills them), read from the store. Only units
// of account (the poll's) are looked at: a unit of another account is
// never reported, ended or not.
func (s *Server) endedOf(ctx context.Context, account string, running []string) ([]string, error) {
	if len(running) == 0 {
		return nil, nil
	}
	states, err := s.store.WorkStates(ctx, account, running)
	if err != nil {
		return nil, err
	}
	var ended []string
	for _, id := range running {
		if st, ok := states[id]; ok && st.Terminal() {
			ended = append(ended, id)
		}
	}
	return ended, nil
}

// connSilence tells how long ago the connection of the call in ctx last
// delivered anything (Options.Silence); nil when not known.
func (s *Server) connSilence(ctx context.Context) func() time.Duration {
	if s.silence == nil {
		return nil
	}
	pr, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	return s.silence(pr.Addr)
}
