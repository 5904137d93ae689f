package server_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/automatortest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestPollClaimsOnlyWhatFitsInOneAnswer: with units at the stdin limit
// queued together, a poll for as many as are queued claims only those
// whose commands fit in its answer, one gRPC message (8 MiB, as in
// `automator serve`): claiming them all would make an answer that cannot
// be sent, and units claimed for it can never be handed to anyone else,
// so they would all fail unsent. The next polls take the rest; every unit
// is claimed once.
func TestPollClaimsOnlyWhatFitsInOneAnswer(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	caller := automatorv1.NewAutomatorServiceClient(a.CallerConn(t))
	proxy := automatorv1.NewProxyServiceClient(a.ProxyConn(t))
	ctx := context.Background()
	const units = 8
	for range units {
		cmd := &automatorv1.Command{Script: "x", Stdin: make([]byte, 1<<20)} // the default limits.max_stdin
		if _, err := caller.Submit(ctx, &automatorv1.ExecuteRequest{Account: a.Account, Command: cmd, Timeout: durationpb.New(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	claimed := map[string]bool{}
	for poll := 1; len(claimed) < units; poll++ {
		if poll > units {
			t.Fatalf("%d polls claimed %d of %d units", poll-1, len(claimed), units)
		}
		resp, err := proxy.Poll(ctx, &automatorv1.PollRequest{InstanceId: "a", MaxUnits: units, Wait: durationpb.New(0)})
		if err != nil {
			t.Fatalf("poll %d, with %d of %d units claimed: %v", poll, len(claimed), units, err)
		}
		if len(resp.GetClaims()) == 0 {
			t.Fatalf("poll %d claimed nothing, with %d of %d units claimed", poll, len(claimed), units)
		}
		for _, c := range resp.GetClaims() {
			if claimed[c.GetWorkId()] {
				t.Fatalf("unit %s claimed twice", c.GetWorkId())
			}
			claimed[c.GetWorkId()] = true
		}
	}
}
