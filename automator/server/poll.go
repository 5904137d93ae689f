package server

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/store"
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
	if err := validID("instance_id", req.GetInstanceId()); err != nil {
		return nil, err
	}
	max := int(req.GetMaxUnits())
	if max < 0 || max > maxUnitsPerPoll {
		return nil, status.Errorf(codes.InvalidArgument, "max_units %d is outside [0, %d]", max, maxUnitsPerPoll)
	}
	if len(req.GetRunning()) > maxRunning {
		return nil, status.Errorf(codes.InvalidArgument, "running lists %d units, more than %d", len(req.GetRunning()), maxRunning)
	}
	// The keys the instance holds decide how its claims are sealed
	// (reseal.go); one that holds no usable key claims nothing.
	ring, err := s.instanceRing(ctx, account, req.GetInstanceId(), req.GetKeyIds())
	if err != nil {
		return nil, err
	}
	window := s.pollWindow
	if w := req.GetWait(); w != nil && w.AsDuration() >= 0 && w.AsDuration() < window {
		window = w.AsDuration()
	}
	window = jitter(window)
	if until := tokenUntilFrom(ctx); !until.IsZero() {
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

	if err := s.instanceSeen(ctx, store.InstanceSeenParams{
		Account:    account,
		InstanceID: req.GetInstanceId(),
		Hostname:   req.GetHostname(),
		Version:    req.GetVersion(),
		InFlight:   len(req.GetRunning()),
		Now:        s.clock.Now(),
	}); err != nil {
		return nil, s.internal(ctx, "recording the instance's poll", err)
	}

	// Register before the first look, so an enqueue between an empty claim
	// and the wait still wakes this poll.
	w := s.hub.poller(account, req.GetInstanceId(), max)
	defer func() {
		if u := w.Close(); u != nil {
			// Handed to this poll as it ended: never delivered.
			s.requeue(ctx, "the poll ended first", *u)
		}
	}()
	timer := time.NewTimer(window)
	defer timer.Stop()
	var handed *store.Work
	for {
		resp, err := p.tryOnce(ctx, account, req, max, ring, handed)
		if err != nil {
			return nil, err
		}
		if len(resp.Claims) > 0 || len(resp.Cancelled) > 0 {
			resp.Wait = durationpb.New(window)
			return resp, nil
		}
		// A unit handed while the window ends or the automator stops is
		// still delivered rather than queued again.
		select {
		case <-w.c:
			if handed = w.take(); handed == nil {
				w.rearm()
			}
			continue
		case <-timer.C:
		case <-s.shutdown:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		if handed = w.take(); handed == nil {
			return &automatorv1.PollResponse{Wait: durationpb.New(window)}, nil
		}
	}
}

// tryOnce reports ended running units and claims what it can, or takes the
// unit handed to the poll (stored as claimed by it) when there is one.
func (p *ProxyService) tryOnce(ctx context.Context, account string, req *automatorv1.PollRequest, max int, ring *keyRing, handed *store.Work) (*automatorv1.PollResponse, error) {
	s := p.s
	resp := &automatorv1.PollResponse{}
	if looked := s.clock.Now(); len(req.GetRunning()) > 0 && !s.hub.runningKnown(account, req.GetInstanceId(), looked, knownEmptyFor) {
		cut := s.hub.cutSeen(account)
		states, err := s.store.WorkStates(ctx, req.GetRunning())
		if err != nil {
			return nil, s.internal(ctx, "reading states of running units", err)
		}
		s.hub.checkedRunning(account, req.GetInstanceId(), cut, looked)
		for _, id := range req.GetRunning() {
			if st, ok := states[id]; ok && st.Terminal() {
				resp.Cancelled = append(resp.Cancelled, id)
			}
		}
	}
	now := s.clock.Now()
	// A poll whose caller already left must not claim: the claim could
	// never be delivered.
	why := ""
	switch {
	case max == 0 || ctx.Err() != nil:
		why = "the poll ended first"
	case tokenExpired(ctx, now):
		why = "the poll's token expired" // it claims nothing more
	case ring != nil && !ring.anyUsable(req.GetKeyIds(), now):
		// The instance's last usable key expired while it waited: it
		// claims nothing, and its next poll is told why.
		why = "the instance's keys expired"
	}
	if why != "" {
		if handed != nil {
			s.requeue(ctx, why, *handed)
		}
		return resp, nil
	}
	var claimed []store.Work
	if handed != nil {
		claimed = []store.Work{*handed}
	} else {
		// Most polls of an idle account find nothing: when another poll of
		// the account just found nothing and no unit was queued since,
		// neither would this one.
		if s.hub.knownEmpty(account, now, knownEmptyFor) {
			return resp, nil
		}
		ids := make([]string, max)
		for i := range ids {
			ids[i] = newID("c_")
		}
		work := s.hub.workSeen(account)
		var err error
		claimed, err = s.store.WorkClaim(ctx, store.WorkClaimParams{
			Account:    account,
			InstanceID: req.GetInstanceId(),
			Max:        max,
			ClaimIDs:   ids,
			Now:        now,
			Expect:     s.hub.expectWork(account),
		})
		if err != nil {
			return nil, s.internal(ctx, "claiming work", err)
		}
		if len(claimed) < max {
			// Fewer than asked: the claim took every claimable unit, so
			// the next poll of the account (this instance's, right after
			// it starts these) need not look until more is queued.
			s.hub.foundEmpty(account, work, now)
		}
		// This poll took all it could carry; there may be more for others.
		if len(claimed) == max {
			s.hub.NotifyWork(account, 1)
		}
	}
	if ctx.Err() != nil {
		// The caller left while the claim was stored: nothing is sent, so
		// its units go back to the queue.
		s.requeue(ctx, "the poll ended first", claimed...)
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	for _, w := range claimed {
		resp.Claims = append(resp.Claims, &automatorv1.Claim{
			WorkId:        w.ID,
			ClaimId:       w.ClaimID,
			Account:       w.Account,
			SealedCommand: s.sealedFor(ctx, ring, req.GetKeyIds(), w, now),
			Remaining:     durationpb.New(w.Deadline.Sub(now)),
		})
		s.metrics.WorkClaimed(w.Account, now.Sub(w.QueuedAt))
		s.log.Debug("work claimed", "work_id", w.ID, "account", account, "instance_id", w.InstanceID, "handed", handed != nil)
	}
	return resp, nil
}

// tokenExpired reports whether the call authenticated with a previous token
// whose overlap has ended by now.
func tokenExpired(ctx context.Context, now time.Time) bool {
	until := tokenUntilFrom(ctx)
	return !until.IsZero() && !now.Before(until)
}

// requeue queues again claims that were never delivered (their poll ended
// or could not take them), wakes a poller for each and returns them as
// queued again. A failure leaves them claimed until their deadline: late,
// never twice.
func (s *Server) requeue(ctx context.Context, why string, claims ...store.Work) []store.Work {
	if len(claims) == 0 {
		return nil
	}
	ctx = context.WithoutCancel(ctx)
	refs := make([]store.ClaimRef, len(claims))
	for i, w := range claims {
		refs[i] = store.ClaimRef{ID: w.ID, InstanceID: w.InstanceID, ClaimID: w.ClaimID}
	}
	queued, err := s.store.WorkUnclaim(ctx, refs)
	if err != nil {
		s.log.Error("queueing undelivered claims again; they time out instead", "why", why, "units", len(claims), "err", err)
		return nil
	}
	for _, w := range queued {
		s.log.Info("undelivered claim queued again", "work_id", w.ID, "account", w.Account, "why", why)
		s.emit(ctx, Event{Kind: EventWorkQueued, Account: w.Account})
	}
	return queued
}

func validID(field, v string) error {
	if v == "" {
		return status.Errorf(codes.InvalidArgument, "%s is required", field)
	}
	if len(v) > maxIDLen {
		return status.Errorf(codes.InvalidArgument, "%s is longer than %d bytes", field, maxIDLen)
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return status.Errorf(codes.InvalidArgument, "%s contains a control character", field)
		}
	}
	return nil
}
