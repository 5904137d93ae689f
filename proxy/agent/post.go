package agent

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// postAttempt bounds one Complete call.
const postAttempt = 10 * time.Second

// post sends a claim's outcome, retrying with backoff until it is accepted,
// refused for good, or the unit's deadline passes (after which the
// automator has timed it out and would refuse it anyway).
func (a *Agent) post(ctx context.Context, c *automatorv1.Claim, deadline time.Time, req *automatorv1.CompleteRequest) {
	req.WorkId = c.GetWorkId()
	req.ClaimId = c.GetClaimId()
	req.InstanceId = a.o.InstanceID
	log := a.log.With("work_id", c.GetWorkId())
	bo := backoff{min: a.o.BackoffMin, max: a.o.BackoffMax}
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, postAttempt)
		_, err := a.o.Client.Complete(actx, req)
		cancel()
		if err == nil {
			log.Debug("result posted", "outcome", req.GetOutcome(), "attempts", attempt)
			return
		}
		switch status.Code(err) {
		case codes.FailedPrecondition, codes.NotFound, codes.InvalidArgument, codes.PermissionDenied:
			log.Warn("result refused by the automator", "err", err)
			return
		}
		wait := bo.next()
		if ctx.Err() != nil || time.Now().Add(wait).After(deadline) {
			log.Warn("result not posted before the deadline; giving up", "attempts", attempt, "err", err)
			return
		}
		if attempt == 1 {
			log.Info("posting the result failed; retrying until the deadline", "err", err)
		}
		if !sleep(ctx, wait) {
			return
		}
	}
}
