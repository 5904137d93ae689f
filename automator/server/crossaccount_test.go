package server_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestPollTellsNothingOfAnotherAccountsUnits: a token authenticates a
// proxy of one account only, which "cannot touch another account". A poll's
// running list names the units its instance runs, and the answer's
// cancelled list tells which of them ended; a unit of another account must
// never be reported there, or a token of one account learns whether any
// unit of another (whose id it saw, in a log say) has ended.
func TestPollTellsNothingOfAnotherAccountsUnits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	globexToken, _ := e.addAccount("globex")
	globex := automatorv1.NewProxyServiceClient(e.conn(globexToken))

	theirs := submitScript(t, e.callerClient(), "acme", "x.sh", time.Minute)
	if _, err := e.callerClient().Cancel(context.Background(), &automatorv1.CancelRequest{WorkId: theirs.GetWorkId()}); err != nil {
		t.Fatal(err)
	}
	resp, err := globex.Poll(context.Background(), &automatorv1.PollRequest{
		InstanceId: "globex-1", MaxUnits: 0, Wait: durationpb.New(0),
		Running: []string{theirs.GetWorkId()},
	})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(resp.GetCancelled(), theirs.GetWorkId()) {
		t.Errorf("a poll of globex was told that acme's unit %s ended (cancelled = %v)", theirs.GetWorkId(), resp.GetCancelled())
	}
}
