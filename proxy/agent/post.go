package agent

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// postAttempt bounds one Complete call.
const postAttempt = 10 * time.Second

// post sends a claim's outcome, retrying with backoff until it is accepted,
// refused for good, or the unit's deadline passes (after which the
// automator has timed it out and would refuse it anyway). The outcome is
// written to the spool first, so a restart before the automator answers
// does not lose it.
func (a *Agent) post(ctx context.Context, c *automatorv1.Claim, deadline time.Time, req *automatorv1.CompleteRequest) {
	req.WorkId = c.GetWorkId()
	req.ClaimId = c.GetClaimId()
	req.InstanceId = a.o.InstanceID
	a.spool.put(c.GetAccount(), deadline, req)
	a.deliver(ctx, deadline, req)
}

// deliver sends a complete request until it is accepted, refused for good,
// or the deadline passes, then removes it from the spool. When ctx ends
// first (the proxy stops) it stays in the spool, and the next start posts
// it.
func (a *Agent) deliver(ctx context.Context, deadline time.Time, req *automatorv1.CompleteRequest) {
	log := a.log.With("work_id", req.GetWorkId())
	bo := backoff{min: a.o.BackoffMin, max: a.o.BackoffMax}
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, postAttempt)
		_, err := a.o.Client.Complete(actx, req)
		cancel()
		if err == nil {
			log.Debug("result posted", "outcome", req.GetOutcome(), "attempts", attempt)
			a.spool.remove(req.GetWorkId())
			return
		}
		switch status.Code(err) {
		case codes.FailedPrecondition, codes.NotFound, codes.InvalidArgument, codes.PermissionDenied:
			log.Warn("result refused by the automator", "err", err)
			a.spool.remove(req.GetWorkId())
			return
		}
		wait := bo.next()
		if ctx.Err() != nil {
			a.keptInSpool(log, attempt, err)
			return
		}
		if time.Now().Add(wait).After(deadline) {
			log.Warn("result not posted before the deadline; giving up", "attempts", attempt, "err", err)
			a.spool.remove(req.GetWorkId())
			return
		}
		if attempt == 1 {
			log.Info("posting the result failed; retrying until the deadline", "err", err)
		}
		if !sleep(ctx, wait) {
			a.keptInSpool(log, attempt, err)
			return
		}
	}
}

// keptInSpool logs a post interrupted by the proxy stopping.
func (a *Agent) keptInSpool(log *slog.Logger, attempts int, err error) {
	if a.spool == nil {
		log.Warn("the proxy stopped before the result was posted; it is lost (no state_dir, so no spool)", "attempts", attempts, "err", err)
		return
	}
	log.Warn("the proxy stopped before the result was posted; it stays in the spool and is posted when the proxy starts again", "attempts", attempts, "err", err)
}
