package pgstore

import (
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
)

// TestAWriteThatGetsNoAnswerGivesUpAsUnavailable: a write that PostgreSQL
// never answers (the replica is cut off from it: packets dropped, no error
// comes) gives up at its own bound, its caller still waiting. That is the
// database out of reach, whose call may be made again once it is back:
// store.IsUnavailable, which the server answers UNAVAILABLE, "retry", not
// an internal error.
func TestAWriteThatGetsNoAnswerGivesUpAsUnavailable(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	ctx := t.Context()
	r := startMarkerRelay(t, dsn, hang)
	cut := open(t, r.dsn)
	t.Cleanup(r.close)
	cut.writeTimeout = time.Second // 30 s in service
	if _, err := cut.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte("h"), KeyID: 1, SealedKey: []byte("k"), Now: testNow}); err != nil {
		t.Fatal(err)
	}
	r.arm([]byte("unanswered-unit"))
	_, err := cut.WorkEnqueue(ctx, enqueueParams("unanswered-unit", "acme")) // ctx does not end meanwhile
	if !store.IsUnavailable(err) {
		t.Errorf("a write PostgreSQL never answered ended with %v; want an error store.IsUnavailable recognises", err)
	}
	if err == nil || !strings.Contains(err.Error(), "no answer within 1s") {
		t.Errorf("a write PostgreSQL never answered ended with %v; want it to say it had no answer within its bound", err)
	}
}
