package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/metrics"
	"github.com/opsgate/opsgate/automator/server"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestRefusedUnitsAndDeniedCallsAreCounted: a unit refused for its
// account's full queue, a call refused because its API key may not use
// the account it names, and a result refused because it did not open are
// each counted on /metrics, at 0 before the first: the log writes at most
// 20 lines a minute of the first two, and one per call of the last, and
// without a counter an operator could alert on none (the queue's depth is
// read at each scrape, and says nothing of the submits refused between
// two; a refused result leaves its unit claimed, and timing out later).
func TestRefusedUnitsAndDeniedCallsAreCounted(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Options{})
	e := newEnv(t, envOptions{metrics: m, limits: server.Limits{MaxQueuedPerAccount: 1}})
	e.addAccount("globex")
	queueFull := map[string]string{"account": e.account, "reason": "queue_full"}
	caller := e.callerClient()
	acmes := submitScript(t, caller, e.account, "x.sh", time.Minute)
	if got := counterValue(t, m, "automator_work_refused_total", queueFull); got != 0 {
		t.Fatalf("automator_work_refused_total%v = %v before any refusal; want 0", queueFull, got)
	}
	if got := counterValue(t, m, "automator_auth_denied_total", nil); got != 0 {
		t.Fatalf("automator_auth_denied_total = %v before any denial; want 0", got)
	}
	unopened := map[string]string{"account": e.account}
	if got := counterValue(t, m, "automator_results_refused_total", unopened); got != 0 {
		t.Fatalf("automator_results_refused_total%v = %v before any refusal; want 0", unopened, got)
	}

	const refused = 3
	for range refused {
		_, err := caller.Submit(context.Background(), &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{Script: "x.sh"}})
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("a unit past acme's queue cap: %v, want ResourceExhausted", err)
		}
	}
	scoped := automatorv1.NewAutomatorServiceClient(e.conn(e.addAPIKey("ak_globex", "globex")))
	for _, account := range []string{e.account, "initech"} { // an account that exists, one that does not
		_, err := scoped.Submit(context.Background(), &automatorv1.ExecuteRequest{Account: account, Command: &automatorv1.Command{Script: "x.sh"}})
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("a unit on %s with a key scoped to globex: %v, want PermissionDenied", account, err)
		}
	}
	// A unit of another account is answered as an unknown one, and
	// counted as denied too.
	if _, err := scoped.Get(context.Background(), &automatorv1.GetRequest{WorkId: acmes.GetWorkId()}); status.Code(err) != codes.NotFound {
		t.Fatalf("Get of acme's unit with a key scoped to globex: %v, want NotFound", err)
	}
	if got := counterValue(t, m, "automator_work_refused_total", queueFull); got != refused {
		t.Errorf("automator_work_refused_total%v = %v after %d units refused for acme's full queue; want %d", queueFull, got, refused, refused)
	}
	if got := counterValue(t, m, "automator_work_refused_total", map[string]string{"account": "globex"}); got > 0 {
		t.Errorf("automator_work_refused_total{account=\"globex\"} = %v; globex refused nothing", got)
	}
	if got := counterValue(t, m, "automator_auth_denied_total", nil); got != 3 {
		t.Errorf("automator_auth_denied_total = %v after 3 calls of a key outside its accounts; want 3", got)
	}
	// acme's queued unit, claimed, gets a tampered result, then one of
	// another unit: each refused and counted, as in a batch.
	proxy := e.proxyClient()
	resp, err := proxy.Poll(context.Background(), &automatorv1.PollRequest{InstanceId: "a", MaxUnits: 1})
	if err != nil || len(resp.GetClaims()) != 1 {
		t.Fatalf("poll: %v, %d claims; want acme's unit", err, len(resp.GetClaims()))
	}
	c := resp.GetClaims()[0]
	tampered := e.sealResult(c.GetWorkId(), &automatorv1.Result{Stdout: []byte("ok")})
	tampered[len(tampered)-1] ^= 1
	if _, err := proxy.Complete(context.Background(), &automatorv1.CompleteRequest{WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(), InstanceId: "a",
		Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: tampered}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a tampered result: %v, want InvalidArgument", err)
	}
	batch, err := proxy.CompleteBatch(context.Background(), &automatorv1.CompleteBatchRequest{Results: []*automatorv1.CompleteRequest{{
		WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(), InstanceId: "a",
		Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: e.sealResult("w_other", &automatorv1.Result{Stdout: []byte("ok")}),
	}}})
	if err != nil || codes.Code(batch.GetOutcomes()[0].GetCode()) != codes.InvalidArgument {
		t.Fatalf("a batch of a result sealed for another unit: %v, %v; want its result refused", batch.GetOutcomes(), err)
	}
	if got := counterValue(t, m, "automator_results_refused_total", unopened); got != 2 {
		t.Errorf("automator_results_refused_total%v = %v after 2 results that did not open; want 2", unopened, got)
	}
	if hasSeries(t, m, "initech") {
		t.Errorf("a series labelled with initech, an account a caller named and that does not exist; want none")
	}
}
