package server_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestTheClaimLogSaysWhetherTheUnitWasHandedToAWaitingPoll: the debug line
// of a claim says handed=true only for a unit handed to a poll that waited
// for work, not for one its poll claimed from the queue, even when the
// claim's time was moved up to the unit's queueing time (the automator's
// clock stepped back between the two: claimed_at is never before
// queued_at).
func TestTheClaimLogSaysWhetherTheUnitWasHandedToAWaitingPoll(t *testing.T) {
	t.Parallel()
	log := &syncLog{}
	clock := newFakeClock()
	e := newEnv(t, envOptions{clock: clock, log: log, logLevel: slog.LevelDebug})
	api, px := e.callerClient(), e.proxyClient()

	queued := submit(t, api, e.account, time.Minute)
	clock.Advance(-time.Second)
	resp, err := px.Poll(context.Background(), &automatorv1.PollRequest{InstanceId: "a", MaxUnits: 1, Wait: durationpb.New(0)})
	if err != nil || len(resp.GetClaims()) != 1 {
		t.Fatalf("poll: %v, %d claims; want the unit queued", err, len(resp.GetClaims()))
	}
	if c := resp.GetClaims()[0]; c.GetWorkId() != queued.GetWorkId() {
		t.Fatalf("claimed %s, want %s", c.GetWorkId(), queued.GetWorkId())
	}
	line := log.awaitLines(t, "the claim's line", "work claimed", "work_id="+queued.GetWorkId())[0]
	if !strings.Contains(line, "handed=false") {
		t.Errorf("a unit claimed from the queue, its claim's time moved up to its queueing: %s; want handed=false", line)
	}

	polled := pollAsync(t.Context(), px, "a", 1)
	e.awaitWaiting(1)
	handed := submit(t, api, e.account, time.Minute)
	if r := waittest.Recv(t, polled, "the waiting poll to answer"); r.err != nil || len(r.resp.GetClaims()) != 1 {
		t.Fatalf("waiting poll: %v, %d claims; want the unit handed to it", r.err, len(r.resp.GetClaims()))
	}
	line = log.awaitLines(t, "the handed unit's line", "work claimed", "work_id="+handed.GetWorkId())[0]
	if !strings.Contains(line, "handed=true") {
		t.Errorf("a unit handed to a waiting poll: %s; want handed=true", line)
	}
}
