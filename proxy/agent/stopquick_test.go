package agent

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// unanswering is an automator, served over real gRPC, that never answers
// a poll: the connection is up (its pings are answered) and nothing comes
// back, as when its packets are dropped past the connection's keepalive,
// or it is stuck. It passes on each poll it gets, as it gets it.
type unanswering struct {
	automatorv1.UnimplementedProxyServiceServer
	polls chan *automatorv1.PollRequest
}

func (u unanswering) Poll(ctx context.Context, in *automatorv1.PollRequest) (*automatorv1.PollResponse, error) {
	u.polls <- in
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

// TestAStopWithNothingToReportIsQuickWhenTheAutomatorIsBlackholed: a proxy
// stopped with nothing running, no result unposted and no poll of its run
// lost, whose automator has gone silent (here it was started off the
// network, still trying to report an earlier run's lost polls, kept for
// its next start), says it is stopping in one poll bounded on its own, not
// by the bound of a report of lost polls: the stop is about as quick as
// it was before the stop said so, and the automator still gets the poll. The bound of lost polls' report is an
// hour here, so a stop that waited for it would never end.
func TestAStopWithNothingToReportIsQuickWhenTheAutomatorIsBlackholed(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), SpoolDirName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var log lockedWriter
	log.b = &bytes.Buffer{}
	logger := slog.New(slog.NewTextHandler(&log, nil))
	if err := newSpool(dir, logger).saveLost([]lostPolls{{Version: 1, InstanceID: "a", Run: "r_earlier", From: 3, Seq: 4, StoppedAt: time.Now().UTC()}}); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := unanswering{polls: make(chan *automatorv1.PollRequest, 16)}
	a := New(Options{
		tune:   tuning{reportLostWithin: time.Hour},
		Client: serveProxyService(t, srv, lis), Keys: crypto.Keys{testKey}, InstanceID: "a", ScriptsDir: t.TempDir(), SpoolDir: dir,
		MaxConcurrency: 1, PollWait: time.Minute, GracePeriod: time.Hour,
		BackoffMin: time.Hour, BackoffMax: time.Hour,
		Logger: logger,
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	if p := waittest.Recv(t, srv.polls, "the earlier run's report"); p.GetRunId() != "r_earlier" {
		t.Fatalf("the first poll is of run %q, want the earlier run's report", p.GetRunId())
	}
	cancel()
	waittest.Recv(t, done, "the stop to end within its poll's own bound, the automator silent")
	if p := waittest.Recv(t, srv.polls, "the stop's poll"); !p.GetStopping() || p.GetLostFrom() != 0 {
		t.Errorf("the poll after the stop: stopping %v, lost_from %d; want the stop's, nothing lost", p.GetStopping(), p.GetLostFrom())
	}
	if mine, _ := newSpool(dir, logger).loadLost("a"); len(mine) != 1 {
		t.Errorf("the spool holds %d reports of an earlier run's lost polls after the stop, want the one not made", len(mine))
	}
}
