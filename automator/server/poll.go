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
	w := s.hub.poller(account, req.GetInstanceId())
	defer w.Close()
	timer := time.NewTimer(window)
	defer timer.Stop()
	for {
		resp, err := p.tryOnce(ctx, account, req, max, ring)
		if err != nil {
			return nil, err
		}
		if len(resp.Claims) > 0 || len(resp.Cancelled) > 0 {
			resp.Wait = durationpb.New(window)
			return resp, nil
		}
		select {
		case <-w.c:
			w.rearm()
		case <-timer.C:
			return &automatorv1.PollResponse{Wait: durationpb.New(window)}, nil
		case <-s.shutdown:
			return &automatorv1.PollResponse{Wait: durationpb.New(window)}, nil
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
}

// tryOnce reports ended running units and claims what it can.
func (p *ProxyService) tryOnce(ctx context.Context, account string, req *automatorv1.PollRequest, max int, ring *keyRing) (*automatorv1.PollResponse, error) {
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
	// A poll whose caller already left must not claim: the claim could
	// never be delivered.
	if max == 0 || ctx.Err() != nil {
		return resp, nil
	}
	ids := make([]string, max)
	for i := range ids {
		ids[i] = newID("c_")
	}
	now := s.clock.Now()
	if until := tokenUntilFrom(ctx); !until.IsZero() && !now.Before(until) {
		return resp, nil // authenticated with a token that has expired since
	}
	if ring != nil {
		if _, ok := ring.newestUsableOf(req.GetKeyIds(), now); !ok {
			// The instance's last usable key expired while it waited: it
			// claims nothing, and its next poll is told why.
			return resp, nil
		}
	}
	// Most polls of an idle account find nothing: when another poll of the
	// account just found nothing and no unit was queued since, neither
	// would this one.
	if s.hub.knownEmpty(account, now, knownEmptyFor) {
		return resp, nil
	}
	work := s.hub.workSeen(account)
	claimed, err := s.store.WorkClaim(ctx, store.WorkClaimParams{
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
		// Fewer than asked: the claim took every claimable unit, so the
		// next poll of the account (this instance's, right after it starts
		// these) need not look until more is queued.
		s.hub.foundEmpty(account, work, now)
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
		s.log.Debug("work claimed", "work_id", w.ID, "account", account, "instance_id", w.InstanceID)
	}
	// This poll took all it could carry; there may be more for others.
	if len(claimed) == max {
		s.hub.NotifyWork(account, 1)
	}
	return resp, nil
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
