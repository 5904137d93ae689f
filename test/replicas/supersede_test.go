//go:build linux

package replicas

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestAPollOnAnotherReplicaSupersedesTheRunsWaitingPoll: a proxy whose
// connection died unseen dials again, and its load balancer sends it to
// another replica. Its first poll there supersedes the poll the first
// replica still holds for the same run (the proxy polls one at a time), so
// that replica hands it no unit: the held poll ends at once, long before its
// window (5 minutes here), and a unit queued on that replica goes to the
// live poll.
func TestAPollOnAnotherReplicaSupersedesTheRunsWaitingPoll(t *testing.T) {
	t.Parallel()
	c := newCluster(t, pgtest.DSN(t), 2)
	for _, r := range c.Replicas {
		path := filepath.Join(r.DataDir, config.FileConfig)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		cfg := regexp.MustCompile(`(?m)^poll_window: .*$`).ReplaceAll(data, []byte("poll_window: 5m"))
		if !strings.Contains(string(cfg), "poll_window: 5m") {
			t.Fatalf("%s has no poll_window line:\n%s", path, data)
		}
		if err := os.WriteFile(path, cfg, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c.Start(t)
	token := profileValue(t, c.createAccount(t, "acme"), "token")
	type answer struct {
		resp *automatorv1.PollResponse
		err  error
	}
	// Numbered as a proxy numbers them: r0's announcement of the first,
	// sent in the background, may reach r1 after the second began there,
	// and must not end it (unnumbered, it would).
	poll := func(r *replica, seq uint64, wait time.Duration) <-chan answer {
		px := automatorv1.NewProxyServiceClient(c.dial(t, r, token))
		out := make(chan answer, 1)
		go func() {
			resp, err := px.Poll(t.Context(), &automatorv1.PollRequest{InstanceId: "pa", RunId: "run-1", PollSeq: seq, MaxUnits: 1, Wait: durationpb.New(wait)})
			out <- answer{resp, err}
		}()
		return out
	}
	held := poll(c.Replicas[0], 1, 5*time.Minute)
	// The held poll waits once r0 has recorded the instance (instances
	// lists it).
	caller := c.callers(t)[0]
	waittest.Until(t, "r0 to hold the instance's poll", func() bool {
		l, err := caller.ListInstances(t.Context(), &automatorv1.ListInstancesRequest{Account: "acme"})
		return err == nil && len(l.GetInstances()) == 1
	})
	live := poll(c.Replicas[1], 2, 5*time.Minute)
	r := waittest.Recv(t, held, "the poll r0 holds to end")
	if r.err != nil || len(r.resp.GetClaims()) != 0 {
		t.Errorf("the poll r0 held: %v, %v; want an empty answer", r.resp, r.err)
	}
	st, err := caller.Submit(t.Context(), &automatorv1.ExecuteRequest{Account: "acme", Command: &automatorv1.Command{Script: "x.sh"}})
	if err != nil {
		t.Fatalf("Submit on r0: %v", err)
	}
	r = waittest.Recv(t, live, "the live poll on r1 to get the unit queued on r0")
	if r.err != nil || len(r.resp.GetClaims()) != 1 || r.resp.GetClaims()[0].GetWorkId() != st.GetWorkId() {
		t.Errorf("the live poll on r1: %v, %v; want the unit %s", r.resp, r.err, st.GetWorkId())
	}
}
