package agent_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/disktest"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/agent"
)

// downPosts is the real client of a real automator whose posts of results
// fail as Unavailable, the automator out of reach, while down is set. It
// tells posted the number of each attempt to post as it ends. It posts
// with Complete only (it has no CompleteBatch), so that it sees each
// attempt.
type downPosts struct {
	real     automatorv1.ProxyServiceClient
	mu       sync.Mutex
	down     bool
	attempts int
	posted   chan int
}

func (c *downPosts) Complete(ctx context.Context, in *automatorv1.CompleteRequest, opts ...grpc.CallOption) (*automatorv1.CompleteResponse, error) {
	c.mu.Lock()
	down := c.down
	c.attempts++
	n := c.attempts
	c.mu.Unlock()
	defer func() {
		select {
		case c.posted <- n:
		default:
		}
	}()
	if down {
		return nil, status.Error(codes.Unavailable, "the automator is out of reach (the test)")
	}
	return c.real.Complete(ctx, in, opts...)
}

func (c *downPosts) Poll(ctx context.Context, in *automatorv1.PollRequest, opts ...grpc.CallOption) (*automatorv1.PollResponse, error) {
	return c.real.Poll(ctx, in, opts...)
}

// lineTap is a log the agent writes while the test waits for lines of it.
type lineTap struct {
	mu    sync.Mutex
	all   strings.Builder
	lines chan string
}

func (l *lineTap) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.all.Write(p)
	l.mu.Unlock()
	select {
	case l.lines <- string(p):
	default:
	}
	return len(p), nil
}

func (l *lineTap) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.all.String()
}

// waitLine waits for a line holding part.
func (l *lineTap) waitLine(t *testing.T, what, part string) {
	t.Helper()
	for !strings.Contains(waittest.Recv(t, l.lines, what), part) {
	}
}

// TestAResultTheFullSpoolCouldNotKeepIsKeptOnceTheDiskHasRoomAgain: a
// result whose spool write failed for want of space (a real tmpfs, full:
// ENOSPC) while the automator cannot be reached is written again once the
// disk has room: the proxy stopped then keeps it, and its next start posts
// it, so the caller gets the script's output. The write was never tried
// again: the stop said "the spool could not keep it; it is lost", the
// spool was empty, and the unit timed out, though the disk had had room
// for a while.
func TestAResultTheFullSpoolCouldNotKeepIsKeptOnceTheDiskHasRoomAgain(t *testing.T) {
	t.Parallel()
	disk := disktest.Small(t, 256<<10)
	spool := filepath.Join(disk, agent.SpoolDirName)
	a := automatortest.Start(t, automatortest.Options{})
	scripts := t.TempDir()
	automatortest.WriteScript(t, scripts, "hello.sh", `echo "hello $PROXY_WORK_ID"`)
	caller := automatorv1.NewAutomatorServiceClient(a.CallerConn(t))

	run := func(c agent.Client, log io.Writer) (stop func()) {
		ag := agent.New(agent.Options{
			Client: c, Keys: crypto.Keys{a.Key}, InstanceID: "full", ScriptsDir: scripts,
			MaxConcurrency: 1, PollWait: time.Second, BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(log, nil)), SpoolDir: spool,
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = ag.Run(ctx) }()
		stop = func() { cancel(); waittest.Recv(t, done, "the agent's Run to return once stopped") }
		t.Cleanup(func() { cancel(); <-done })
		return stop
	}

	free := disktest.Fill(t, disk)
	c := &downPosts{real: automatorv1.NewProxyServiceClient(a.ProxyConn(t)), down: true, posted: make(chan int, 1)}
	log := &lineTap{lines: make(chan string, 64)}
	stop := run(c, log)
	st, err := caller.Submit(context.Background(), &automatorv1.ExecuteRequest{Account: a.Account,
		Command: &automatorv1.Command{Script: "hello.sh"}, Timeout: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	log.waitLine(t, "the spool write to fail for want of space", "cannot keep results in the spool")
	free()
	// The attempt on its way as the disk was freed may have been retried
	// before it; the one after the next is surely retried after it.
	freedAt := waittest.Recv(t, c.posted, "an attempt to post after the disk was freed")
	for n := freedAt; n < freedAt+2; {
		n = waittest.Recv(t, c.posted, "the attempts to post that follow")
	}
	stop()
	if out := log.String(); strings.Contains(out, "it is lost") || !strings.Contains(out, "it stays in the spool") {
		t.Errorf("the stop with the disk free again says:\n%s\nwant the result kept in the spool", out)
	}
	entries, _ := os.ReadDir(spool)
	if len(entries) != 1 {
		t.Fatalf("after the stop the spool holds %d files, want the result's record", len(entries))
	}

	c.mu.Lock()
	c.down = false
	c.mu.Unlock()
	run(c, io.Discard)
	got := waitEnded(t, caller, st.GetWorkId())
	if got.GetState() != automatorv1.State_STATE_SUCCEEDED || string(got.GetResult().GetStdout()) != "hello "+st.GetWorkId()+"\n" {
		t.Fatalf("the unit ended %v (%s), stdout %q; want succeeded with the script's output, posted from the spool by the next start",
			got.GetState(), got.GetReason(), got.GetResult().GetStdout())
	}
}

// waitEnded waits for unit id to end, and returns it.
func waitEnded(t *testing.T, caller automatorv1.AutomatorServiceClient, id string) *automatorv1.WorkStatus {
	t.Helper()
	ctx := waittest.Context(t, "unit "+id+" to end")
	for {
		got, err := caller.Wait(ctx, &automatorv1.WaitRequest{WorkId: id})
		if err != nil {
			t.Fatal(err)
		}
		switch got.GetState() {
		case automatorv1.State_STATE_QUEUED, automatorv1.State_STATE_CLAIMED:
			continue
		}
		return got
	}
}
