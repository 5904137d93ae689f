package server_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestABatchOfRefusedResultsIsOneWarning: a CompleteBatch call whose
// results do not open (tampered ones, truncated ones) is logged as one
// WARN that counts them by reason and names the first few work ids, the
// others one DEBUG line each, not a WARN per result (a token holder, or a
// proxy with a stale spool, would write 256 a call); each result is still
// answered alone.
func TestABatchOfRefusedResultsIsOneWarning(t *testing.T) {
	t.Parallel()
	log := &syncLog{}
	e := newEnv(t, envOptions{log: log, logLevel: slog.LevelDebug})
	ctx := context.Background()
	caller, proxy := e.callerClient(), e.proxyClient()
	const n = 9
	for range n {
		submit(t, caller, e.account, time.Minute)
	}
	resp, err := proxy.Poll(ctx, &automatorv1.PollRequest{InstanceId: "a", MaxUnits: n})
	if err != nil || len(resp.GetClaims()) != n {
		t.Fatalf("poll: %v, %d claims, want %d", err, len(resp.GetClaims()), n)
	}
	var results []*automatorv1.CompleteRequest
	var ids []string
	for i, c := range resp.GetClaims() {
		r := &automatorv1.CompleteRequest{WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(), InstanceId: "a",
			Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: e.sealResult(c.GetWorkId(), &automatorv1.Result{Stdout: []byte("x")})}
		if i < 6 {
			r.SealedResult[len(r.SealedResult)-1] ^= 1 // tampered
		} else {
			r.SealedResult = r.SealedResult[:3] // truncated
		}
		results = append(results, r)
		ids = append(ids, c.GetWorkId())
	}
	got, err := proxy.CompleteBatch(ctx, &automatorv1.CompleteBatchRequest{Results: results})
	if err != nil {
		t.Fatalf("CompleteBatch: %v", err)
	}
	for i, o := range got.GetOutcomes() {
		if codes.Code(o.GetCode()) != codes.InvalidArgument || !strings.Contains(o.GetMessage(), "did not open") {
			t.Errorf("outcome %d: %v %q, want InvalidArgument, did not open", i, codes.Code(o.GetCode()), o.GetMessage())
		}
	}

	warns := log.lines("level=WARN", "refused")
	if len(warns) != 1 {
		t.Fatalf("%d WARN lines of refused results, want one for the call:\n%s", len(warns), strings.Join(warns, "\n"))
	}
	w := warns[0]
	if !strings.Contains(w, "refused=9") {
		t.Errorf("the warning does not say 9 were refused: %s", w)
	}
	// Two reasons, each with its count.
	if !strings.Contains(w, "(6)") || !strings.Contains(w, "(3)") {
		t.Errorf("the warning does not count the refusals by reason (6 tampered, 3 truncated): %s", w)
	}
	named := 0
	for i, id := range ids {
		if strings.Contains(w, id) {
			named++
			if i >= 5 {
				t.Errorf("the warning names %s, result %d, not one of the first few: %s", id, i, w)
			}
		} else if i < 5 {
			t.Errorf("the warning does not name %s, result %d, one of the first five: %s", id, i, w)
		} else if d := log.lines("level=DEBUG", "result refused", "work_id="+id); len(d) != 1 {
			t.Errorf("%s, not named in the warning, has %d DEBUG lines, want one", id, len(d))
		}
	}
	if named != 5 {
		t.Errorf("the warning names %d work ids, want the first 5", named)
	}
}
