package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/grpcwire"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// maxFailureLen bounds the plain failure reason a proxy may post.
const maxFailureLen = 1024

// maxSealedResult bounds a sealed result: a proxy cuts each output stream
// at its max_output_bytes, at most 2 MiB, so its results are at most
// 4 MiB and some bytes of ids, times and sealing. A larger one comes from
// no proxy of ours; stored, it would take room in the store for no one,
// and near the message limit (8 MiB) no answer could carry it to its
// caller.
const maxSealedResult = 4<<20 + 64<<10

// maxCompleteBatch bounds the results of one CompleteBatch call.
const maxCompleteBatch = 256

// Complete records the outcome of a claim. The sealed result must open with
// the account's key for this unit and the result direction; a result for a
// unit that is already terminal is refused with FAILED_PRECONDITION.
//
// A Complete with no work_id, refused (INVALID_ARGUMENT) once
// authenticated, claims, records and writes nothing, so `proxy status`
// checks with it the profile of a proxy that is not running (a warm
// standby) without making it look like a polling instance: its trailer
// tells the caller how its token stands (profileTrailer). Real results do
// not pay for the trailer.
func (p *ProxyService) Complete(ctx context.Context, req *automatorv1.CompleteRequest) (*automatorv1.CompleteResponse, error) {
	if req.GetWorkId() == "" {
		_ = grpc.SetTrailer(ctx, p.s.profileTrailer(ctx))
	}
	if err := p.complete(ctx, req, "Complete"); err != nil {
		var r *refusedResult
		if errors.As(err, &r) {
			p.s.noteRefused([]*refusedResult{r}, 1)
		}
		return nil, err
	}
	return &automatorv1.CompleteResponse{}, nil
}

// CompleteBatch records several outcomes, each as Complete would, and says
// how each went. They are recorded concurrently, so the store commits them
// together (group commit) and one result's refusal or slowness does not hold
// up the others' recording. The results refused as not opening are logged
// together, in one warning for the call (noteRefused).
func (p *ProxyService) CompleteBatch(ctx context.Context, req *automatorv1.CompleteBatchRequest) (*automatorv1.CompleteBatchResponse, error) {
	results := req.GetResults()
	if len(results) == 0 || len(results) > maxCompleteBatch {
		return nil, status.Errorf(codes.InvalidArgument, "a batch holds 1 to %d results, not %d", maxCompleteBatch, len(results))
	}
	outcomes := make([]*automatorv1.CompleteOutcome, len(results))
	refused := make([]*refusedResult, len(results))
	var wg sync.WaitGroup
	for i, r := range results {
		do := func() {
			outcomes[i] = &automatorv1.CompleteOutcome{}
			if err := p.complete(ctx, r, "CompleteBatch"); err != nil {
				errors.As(err, &refused[i])
				st := status.Convert(err)
				outcomes[i].Code, outcomes[i].Message = int32(st.Code()), st.Message()
			}
		}
		if i == len(results)-1 {
			do() // the last on this goroutine
			break
		}
		wg.Go(do)
	}
	wg.Wait()
	p.s.noteRefused(slices.DeleteFunc(refused, func(r *refusedResult) bool { return r == nil }), len(results))
	return &automatorv1.CompleteBatchResponse{Outcomes: outcomes}, nil
}

// refusedResult is a result refused because its sealed result did not
// open: the one refusal that is logged (the others are the proxy's to
// see in its answer), since it means a tampered result, a proxy holding
// keys the account no longer has, or a token in the wrong hands.
// It is the refusal's error: its gRPC status is the answer.
type refusedResult struct {
	account, workID, instanceID string
	err                         error // why it did not open
	st                          *status.Status
}

func (r *refusedResult) Error() string              { return r.st.Err().Error() }
func (r *refusedResult) GRPCStatus() *status.Status { return r.st }

// refusedNamed is how many work ids the warning of a batch's refused
// results names; the others are logged at debug level.
const refusedNamed = 5

// noteRefused counts the results of one call (of n results) refused as
// not opening, and logs them: one warning, whatever their number, so that
// a call of 256 such results (a token holder's, or a proxy's with a stale
// spool) writes one line, not 256. A single one is logged as it always was ("result
// refused", its work id and why); several are counted by reason, the
// first refusedNamed work ids named, and each of the others is logged at
// debug level.
func (s *Server) noteRefused(refused []*refusedResult, n int) {
	for _, r := range refused {
		s.refusalMetrics.ResultRefused(r.account)
	}
	switch len(refused) {
	case 0:
		return
	case 1:
		r := refused[0]
		s.log.Warn("result refused", "work_id", r.workID, "instance_id", r.instanceID, "err", r.err)
		return
	}
	var reasons []string // in order of first appearance
	count := map[string]int{}
	var instances []string
	for _, r := range refused {
		why := r.err.Error()
		if count[why] == 0 {
			reasons = append(reasons, why)
		}
		count[why]++
		if !slices.Contains(instances, r.instanceID) && len(instances) < refusedNamed {
			instances = append(instances, r.instanceID)
		}
	}
	var by strings.Builder
	for i, why := range reasons {
		if i > 0 {
			by.WriteString("; ")
		}
		fmt.Fprintf(&by, "%s (%d)", why, count[why])
	}
	named := refused[:min(len(refused), refusedNamed)]
	ids := make([]string, len(named))
	for i, r := range named {
		ids[i] = r.workID
	}
	attrs := []any{"refused", len(refused), "results", n, "reasons", by.String(),
		"work_ids", strings.Join(ids, " "), "instance_ids", strings.Join(instances, " ")}
	if rest := len(refused) - len(named); rest > 0 {
		attrs = append(attrs, "not_named", rest, "see", "each at debug level (result refused)")
	}
	s.log.Warn("results of one call refused: their sealed results did not open", attrs...)
	for _, r := range refused[len(named):] {
		s.log.Debug("result refused", "work_id", r.workID, "instance_id", r.instanceID, "err", r.err)
	}
}

// complete is Complete's work for one result; via names the call it came in
// (the audit record's detail). Its error is a gRPC status; a
// *refusedResult when the sealed result did not open, for the caller to
// log (noteRefused).
func (p *ProxyService) complete(ctx context.Context, req *automatorv1.CompleteRequest, via string) error {
	s := p.s
	account := accountFrom(ctx)
	if err := validID("work_id", req.GetWorkId()); err != nil {
		return err
	}
	if err := validID("claim_id", req.GetClaimId()); err != nil {
		return err
	}
	// Only logged (a refused result's line names it), but the proxy's to
	// write: held to a poll's rules, so that no call writes a megabyte,
	// or an escape sequence, into the log. A proxy sends the id it polls
	// with, which passed them; none at all is served.
	if id := req.GetInstanceId(); id != "" {
		if err := validID("instance_id", id); err != nil {
			return err
		}
	}
	if n := len(req.GetSealedResult()); n > maxSealedResult {
		return status.Errorf(codes.InvalidArgument, "sealed_result is %d bytes, more than the limit of %d (each output stream at most 2 MiB)", n, maxSealedResult)
	}
	if len(req.GetFailure()) > maxFailureLen {
		return status.Errorf(codes.InvalidArgument, "failure is longer than %d bytes", maxFailureLen)
	}
	// The unit is not read first: the completion below is conditional on
	// the account, the claim and the state, and says why when it refuses.
	w := store.Work{ID: req.GetWorkId(), Account: account}

	var st store.State
	var reason string
	switch req.GetOutcome() {
	case automatorv1.Outcome_OUTCOME_SUCCEEDED:
		st = store.StateSucceeded
		if len(req.GetSealedResult()) == 0 {
			return status.Error(codes.InvalidArgument, "sealed_result is required for outcome SUCCEEDED")
		}
	case automatorv1.Outcome_OUTCOME_FAILED:
		st = store.StateFailed
		reason = "the proxy could not run the command"
		if req.GetFailure() != "" {
			reason = PrintableFailure(req.GetFailure())
		}
	default:
		return status.Errorf(codes.InvalidArgument, "outcome %v is not SUCCEEDED or FAILED", req.GetOutcome())
	}
	if len(req.GetSealedResult()) > 0 {
		r, err := s.openResult(ctx, w, req.GetSealedResult())
		if err == nil && st == store.StateSucceeded && r.GetFailure() != "" {
			// Recorded, it would read as altered (contradicted).
			return status.Errorf(codes.InvalidArgument, "sealed result of work %q says its proxy could not run the command, posted with outcome SUCCEEDED: post it as FAILED", w.ID)
		}
		if err != nil {
			if unread := (*keysUnread)(nil); errors.As(err, &unread) {
				// Not the result's fault: the proxy posts it again
				// (UNAVAILABLE, or INTERNAL), where a refusal would make
				// it drop a result its script produced.
				return s.internal(ctx, "reading the account's keys to open a result", unread.err)
			}
			if cur, gerr := s.store.WorkGet(ctx, w.ID); errors.Is(gerr, store.ErrNotFound) || (gerr == nil && cur.Account != account) {
				return status.Errorf(codes.NotFound, "work %q not found for this account", w.ID)
			}
			return &refusedResult{account: account, workID: w.ID, instanceID: req.GetInstanceId(), err: err,
				st: status.Newf(codes.InvalidArgument, "sealed result of work %q did not open: %v", w.ID, err)}
		}
	}

	now := s.clock.Now()
	var done store.Work
	err := s.refusedFromRead(ctx, account, req, now)
	if err == nil {
		audit := s.event(ctx, store.AuditWorkEnded, via)
		done, err = s.store.WorkComplete(ctx, store.WorkCompleteParams{
			ID:           w.ID,
			ClaimID:      req.GetClaimId(),
			Account:      account,
			State:        st,
			SealedResult: req.GetSealedResult(),
			Reason:       reason,
			Now:          now,
			Audit:        &audit,
		})
	}
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrClaimMismatch) || errors.Is(err, store.ErrNotClaimable) {
		s.results.refused(account, now)
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return status.Errorf(codes.NotFound, "work %q not found for this account", w.ID)
	case errors.Is(err, store.ErrClaimMismatch):
		return status.Errorf(codes.FailedPrecondition, "work %q is claimed under another claim id", w.ID)
	case errors.Is(err, store.ErrNotClaimable):
		cur, gerr := s.store.WorkGet(ctx, w.ID)
		if gerr == nil && cur.State == store.StateClaimed {
			// Past its deadline but not yet swept: end it now.
			s.expireDue(ctx, w.ID)
			cur, gerr = s.store.WorkGet(ctx, w.ID)
		}
		if gerr != nil {
			return status.Errorf(codes.FailedPrecondition, "work %q is no longer claimed (ended, or past its deadline); result refused", w.ID)
		}
		if cur.Account == account && cur.ClaimID == req.GetClaimId() && cur.State == st && cur.Reason == reason && bytes.Equal(cur.SealedResult, req.GetSealedResult()) {
			// This very result was recorded before and its answer lost: the
			// replica that recorded it may have died before announcing the
			// end, which would leave the unit's waiting callers on other
			// replicas waiting until their next recheck. Announce it again.
			if s.mayBeUnannounced(cur) {
				s.emit(ctx, Event{Kind: EventWorkEnded, Account: cur.Account, WorkID: cur.ID, ended: &cur})
			}
			return status.Errorf(codes.FailedPrecondition, "work %q is %s: "+grpcwire.ResultRecordedAlready, w.ID, cur.State)
		}
		return status.Errorf(codes.FailedPrecondition, "work %q is %s; result refused", w.ID, cur.State)
	case err != nil:
		return s.internal(ctx, "recording a result", err)
	}
	s.emit(ctx, Event{Kind: EventWorkEnded, Account: done.Account, WorkID: done.ID, ended: &done})
	s.metrics.WorkFinished(done)
	// Debug, like "work queued": a line per unit at Info cost 5 % of the
	// automator's CPU under load (docs/performance.md), and the audit log
	// and the metrics already hold every ending. Cancels and timeouts stay
	// at Info.
	s.log.Debug("work finished", "work_id", done.ID, "account", account, "state", string(done.State), "instance_id", done.InstanceID)
	return nil
}

// refusedFromRead is, for a result of account whose results are read
// before they are written (resultGuard), the store's refusal of it as the
// unit reads: ErrNotFound (no unit, or another account's), or
// store.NotCompletable's (not claimed, or under another claim id). nil
// when the result is to be written: the account's results are not read
// first, the unit is claimed under the result's claim, or the read
// failed (the write says how the store is).
func (s *Server) refusedFromRead(ctx context.Context, account string, req *automatorv1.CompleteRequest, now time.Time) error {
	if !s.results.wary(account, now) {
		return nil
	}
	cur, err := s.store.WorkGet(ctx, req.GetWorkId())
	switch {
	case errors.Is(err, store.ErrNotFound) || (err == nil && cur.Account != account):
		return store.ErrNotFound
	case err == nil && (cur.State != store.StateClaimed || cur.ClaimID != req.GetClaimId()):
		return store.NotCompletable(cur, req.GetClaimId())
	}
	return nil
}

// openResult opens a sealed result of unit w.
func (s *Server) openResult(ctx context.Context, w store.Work, sealed []byte) (*automatorv1.Result, error) {
	plain, err := s.open(ctx, w.Account, w.ID, crypto.DirResult, sealed)
	if err != nil {
		return nil, err
	}
	var r automatorv1.Result
	if err := proto.Unmarshal(plain, &r); err != nil {
		return nil, errors.New("sealed result holds no valid Result message")
	}
	return &r, nil
}
