package dashboard_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestAFailureAProxySealedIsShownAsTheAPIShowsIt: the reason a proxy seals
// in the result of a failed unit is its own text, as the plain reason it
// posts is: a bidi override, a zero-width space or an escape sequence in it
// would show the operator another reason than the API's (which turns each
// into U+FFFD, and a line break into a space). The dashboard shows it as
// the API does, on the work list and on the unit's page.
func TestAFailureAProxySealedIsShownAsTheAPIShowsIt(t *testing.T) {
	e := newEnv(t)
	now := e.clock.Now()
	e.enqueue("w_forged", "acme", now.Add(-time.Minute), &automatorv1.Command{Script: "x.sh"})
	ctx := t.Context()
	ws, err := e.st.WorkClaim(ctx, store.WorkClaimParams{Account: "acme", InstanceID: "a-1", Max: 1, ClaimIDs: []string{"c"}, Now: now.Add(-59 * time.Second)})
	if err != nil || len(ws) != 1 {
		t.Fatalf("claim: %v %v", ws, err)
	}
	failure := "cannot start \u202ehs.mr\u200b\x1b[2J\nrm.sh"
	if _, err := e.st.WorkComplete(ctx, store.WorkCompleteParams{ID: ws[0].ID, ClaimID: ws[0].ClaimID, State: store.StateFailed,
		Reason: "cannot start \uFFFDhs.mr\uFFFD\uFFFD[2J rm.sh", Now: now.Add(-58 * time.Second),
		SealedResult: e.seal("acme", ws[0].ID, crypto.DirResult, &automatorv1.Result{Failure: failure})}); err != nil {
		t.Fatal(err)
	}
	c := client(t)
	e.signIn(c, e.url, "admin")
	want := "cannot start \uFFFDhs.mr\uFFFD\uFFFD[2J rm.sh"
	for _, page := range []string{"/dashboard/work", "/dashboard/work/w_forged"} {
		code, body := get(t, c, e.url+page)
		if code != http.StatusOK {
			t.Fatalf("%s: %d", page, code)
		}
		if strings.ContainsAny(body, "\u202e\u200b\x1b") || !strings.Contains(body, want) {
			t.Errorf("%s shows the failure as the proxy sealed it, not as the API shows it (%q):\n%s", page, want, body)
		}
	}
}
