package agent

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/opsgate/opsgate/internal/ctxtime"
	"github.com/opsgate/opsgate/internal/grpcwire"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// postAttempt and minPostRate bound one call posting results (Complete or
// CompleteBatch): postAttempt, plus the time its results take to send at
// minPostRate (postBound). A fixed bound cut every attempt of a large
// result on a thin uplink before it was sent, and each retry sent it all
// again, until the deadline: on a 256 kbit/s link 1 MiB takes about 35 s,
// and a 10 s bound never let it through. A unit's deadline bounds every
// attempt in any case. Tests change them per Agent (tuning).
const (
	postAttempt = 10 * time.Second
	// minPostRate, in bytes a second, is the slowest upload a post is
	// given time for (64 kbit/s): 1 MiB is given 138 s, the largest
	// result a proxy makes (two 2 MiB streams) more than the default
	// 5 minutes. A call hung on a live connection (the automator stuck)
	// is given up as late, but a retry would go to the same automator.
	minPostRate = 8 << 10
)

// postBound bounds a call posting size bytes of results.
func (t tuning) postBound(size int) time.Duration {
	return t.postAttempt + time.Duration(size)*time.Second/time.Duration(t.minPostRate)
}

// lastPostLead is how long before a unit's deadline the last attempt to
// post its result begins, when the backoff would wake past the deadline:
// the attempt has that long (the deadline bounds every attempt).
const lastPostLead = time.Second

// maxPostPatience is how many times at most an attempt's bound is doubled
// for the attempts before it that ran out of their own time (deliver).
const maxPostPatience = 3

// post sends a claim's outcome, retrying with backoff until it is accepted,
// refused for good, or the unit's deadline passes (after which the
// automator has timed it out and would refuse it anyway). The outcome is
// written to the spool at the same time as it is first sent, so a restart
// loses it only when it comes before both the write and the automator's
// answer.
func (a *Agent) post(ctx context.Context, c *automatorv1.Claim, deadline time.Time, req *automatorv1.CompleteRequest) {
	req.WorkId = c.GetWorkId()
	req.ClaimId = c.GetClaimId()
	req.InstanceId = a.o.InstanceID
	e := a.spool.put(c.GetAccount(), deadline, req, a.track)
	a.deliver(ctx, deadline, req, e)
}

// track runs f in a goroutine that Run waits for before it returns.
func (a *Agent) track(f func()) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		f()
	}()
}

// deliver sends a complete request until it is accepted, refused for good,
// or the deadline passes, then settles its spool entry e (which removes the
// spooled file, or skips the write). When ctx ends first (the proxy stops)
// it waits for the write, so the result stays in the spool and the next
// start posts it.
//
// The first attempt is made even when ctx has ended (bounded by
// postBound and the deadline): a unit killed at the end of the grace period, just as ctx
// ends, is still reported before the proxy exits. A stop ends the retries,
// not the first post.
func (a *Agent) deliver(ctx context.Context, deadline time.Time, req *automatorv1.CompleteRequest, e *spoolEntry) {
	log := a.log.With("work_id", req.GetWorkId())
	bo := backoff{min: a.o.BackoffMin, max: a.o.BackoffMax}
	size := proto.Size(req)
	// ranOut counts the attempts that ran out of their own time: each
	// after one is given twice as long (up to 2^maxPostPatience times
	// postBound). An automator on a loaded machine, its store's writes
	// queued behind others, may take longer than the bound to store a
	// result, and attempts given the same bound again and again would
	// each be cut off, until the deadline.
	ranOut := 0
	last := false // the next attempt is the last, lastPostLead before the deadline
	for attempt := 1; ; attempt++ {
		parent := ctx
		if attempt == 1 {
			parent = context.WithoutCancel(ctx)
		}
		// No attempt outlives the deadline: gRPC sends no call whose
		// context has ended, so a retry that wakes late (a timer fires
		// after it is due) reports nothing after the deadline (guarantee 7).
		end := time.Now().Add(a.o.tune.postBound(size) << min(ranOut, maxPostPatience))
		if deadline.Before(end) {
			end = deadline
		}
		actx, cancel := context.WithDeadline(parent, end)
		// A retry waits for a connection, within its bound, rather than
		// failing at once on the error of the last dial while the link
		// is down: it goes out as soon as the link is back (a review:
		// every retry of a partition that healed 3 s before the deadline
		// failed so, and the result was lost). The first attempt does
		// not: a stopping proxy makes it with no connection to wait for.
		waited := attempt > 1
		err := a.poster.completeWaiting(actx, req, deadline, waited)
		// Its time is up when its deadline has passed, whether or not
		// actx's timer has fired yet: a batch's call, whose own deadline
		// is about the same, may end first on a loaded machine, and an
		// attempt that did not count as run out left the next one the
		// same bound, every time (seen under load: 46 attempts of 100 ms
		// to an automator taking 150 ms, none given longer).
		ranOutNow := errors.Is(actx.Err(), context.DeadlineExceeded) || !time.Now().Before(end)
		if ranOutNow {
			ranOut++
		}
		cancel()
		if err == nil {
			log.Debug("result posted", "outcome", req.GetOutcome(), "attempts", attempt)
			e.settle()
			return
		}
		switch code := status.Code(err); code {
		case codes.FailedPrecondition, codes.NotFound, codes.InvalidArgument, codes.PermissionDenied:
			if code == codes.FailedPrecondition && strings.HasSuffix(status.Convert(err).Message(), grpcwire.ResultRecordedAlready) {
				// An earlier attempt's answer was lost: delivered.
				log.Info("result recorded by an earlier attempt, whose answer was lost", "attempts", attempt, "err", err)
				e.settle()
				return
			}
			if e.leftForItsInstance(code) {
				log.Warn("result another instance left in the spool refused as no unit of this proxy's account: left in the spool for its instance", "other_instance_id", req.GetInstanceId(), "err", err)
				return
			}
			log.Warn("result refused by the automator", "err", err)
			e.settle()
			return
		}
		wait := bo.next()
		if waited && ranOutNow {
			// It waited out its bound for a connection, or for an
			// answer: that was its backoff.
			wait = 0
		}
		if ctx.Err() != nil {
			a.keptInSpool(log, e, attempt, err)
			return
		}
		if left := time.Until(deadline); wait >= left {
			// A backoff that would wake past the deadline leaves one
			// last attempt, lastPostLead before it, rather than none:
			// an automator back (its disk freed) in those seconds takes
			// the result. With the backoff at its 15 s, the proxy gave
			// up up to 15 s before the deadline. A backoff that wakes
			// before the deadline is kept, in its last second too.
			if last || left <= lastPostLead {
				log.Warn("result not acknowledged by the automator before the deadline; giving up (a post whose answer was lost may have been taken)", "attempts", attempt, "err", err)
				e.settle()
				return
			}
			wait, last = left-lastPostLead, true
		}
		if attempt == 1 {
			log.Info("posting the result failed; retrying until the deadline", "err", err)
		}
		// A spool write that failed (its disk full) is tried again while
		// the result waits: a restart would lose it otherwise.
		e.rewrite()
		if !ctxtime.Sleep(ctx, wait) {
			a.keptInSpool(log, e, attempt, err)
			return
		}
	}
}

// keptInSpool logs a post interrupted by the proxy stopping, once the
// spool write (if any) is over.
func (a *Agent) keptInSpool(log *slog.Logger, e *spoolEntry, attempts int, err error) {
	switch {
	case a.spool == nil:
		log.Warn("the proxy stopped before the result was posted; it is lost (no state_dir, so no spool)", "attempts", attempts, "err", err)
	case !e.wait() && !e.rewrite():
		log.Warn("the proxy stopped before the result was posted, and the spool could not keep it; it is lost", "attempts", attempts, "err", err)
	default:
		log.Warn("the proxy stopped before the result was posted; it stays in the spool and is posted when the proxy starts again", "attempts", attempts, "err", err)
	}
}
