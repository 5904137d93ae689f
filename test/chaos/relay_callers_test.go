package chaos

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// fakeAutomatorService answers Submit with a queued unit and Wait with the
// state in state (claimed until a test sets another).
type fakeAutomatorService struct {
	automatorv1.UnimplementedAutomatorServiceServer
	state atomic.Int32
}

func (f *fakeAutomatorService) Submit(_ context.Context, in *automatorv1.ExecuteRequest) (*automatorv1.WorkStatus, error) {
	return &automatorv1.WorkStatus{WorkId: "w-" + in.GetIdempotencyKey(), State: automatorv1.State_STATE_QUEUED}, nil
}

func (f *fakeAutomatorService) Wait(_ context.Context, in *automatorv1.WaitRequest) (*automatorv1.WorkStatus, error) {
	return &automatorv1.WorkStatus{WorkId: in.GetWorkId(), State: automatorv1.State(f.state.Load())}, nil
}

// TestRelayCutsACallersSubmitAndWaitAnswers: an armed cut of a Submit
// answer takes the next one, naming its unit; an armed cut of a Wait
// answer lets answers without an end through and takes the first that
// carries one, naming the unit and the end.
func TestRelayCutsACallersSubmitAndWaitAnswers(t *testing.T) {
	f := &fakeAutomatorService{}
	f.state.Store(int32(automatorv1.State_STATE_CLAIMED))
	r, conn, cuts := serveThroughRelay(t, func(gs *grpc.Server) { automatorv1.RegisterAutomatorServiceServer(gs, f) })
	c := automatorv1.NewAutomatorServiceClient(conn)

	r.Arm(CutSubmitResponse)
	_, err := c.Submit(ctxT(t), &automatorv1.ExecuteRequest{IdempotencyKey: "k1"})
	if status.Code(err) != codes.Unavailable && status.Code(err) != codes.Internal {
		t.Fatalf("a submit whose answer was cut returned %v, want Unavailable", err)
	}
	if cut := waittest.Recv(t, cuts, "the relay to report the submit answer it cut"); cut.Kind != CutSubmitResponse || len(cut.WorkIDs) != 1 || cut.WorkIDs[0] != "w-k1" || cut.State != "queued" {
		t.Fatalf("cut %+v, want the submit answer of w-k1, queued", cut)
	}

	r.Arm(CutWaitResponse)
	if st, err := c.Wait(ctxT(t), &automatorv1.WaitRequest{WorkId: "w-k1"}); err != nil || st.GetState() != automatorv1.State_STATE_CLAIMED {
		t.Fatalf("a wait answer without an end through an armed relay: %v, %v", st.GetState(), err)
	}
	f.state.Store(int32(automatorv1.State_STATE_TIMED_OUT))
	_, err = c.Wait(ctxT(t), &automatorv1.WaitRequest{WorkId: "w-k1"})
	if status.Code(err) != codes.Unavailable && status.Code(err) != codes.Internal {
		t.Fatalf("a wait whose answer was cut returned %v, want Unavailable", err)
	}
	if cut := waittest.Recv(t, cuts, "the relay to report the wait answer it cut"); cut.Kind != CutWaitResponse || len(cut.WorkIDs) != 1 || cut.WorkIDs[0] != "w-k1" || cut.State != StateTimedOut {
		t.Fatalf("cut %+v, want the wait answer of w-k1, timed out", cut)
	}
	if st, err := c.Wait(ctxT(t), &automatorv1.WaitRequest{WorkId: "w-k1"}); err != nil || st.GetState() != automatorv1.State_STATE_TIMED_OUT {
		t.Fatalf("waiting again after the cut: %v, %v; want timed out", st.GetState(), err)
	}
}

// TestRelayHealthCheckSendsNewConnectionsPastATargetThatFailsIt: the
// relay's first target accepts connections but its health check fails (a
// hung replica, one without its database); once the check has taken it
// out, new connections go to the second target; when it answers again,
// they go to it again.
func TestRelayHealthCheckSendsNewConnectionsPastATargetThatFailsIt(t *testing.T) {
	var targets [2]net.Listener
	accepted := [2]chan struct{}{make(chan struct{}, 16), make(chan struct{}, 16)}
	for i := range targets {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		targets[i] = ln
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted[i] <- struct{}{}
				// Held until the relay closes it: a target that closed it
				// first would make the relay reset the dialler's end,
				// perhaps before its dial had returned.
				go func() {
					_, _ = io.Copy(io.Discard, c)
					c.Close()
				}()
			}
		}()
	}
	var ready atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	hs := &http.Server{Handler: mux}
	hln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = hs.Serve(hln) }()
	t.Cleanup(func() { hs.Close() })

	first, second := targets[0].Addr().String(), targets[1].Addr().String()
	r, err := NewBalancingRelay([]string{first, second}, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	r.CheckHealth(map[string]string{first: "http://" + hln.Addr().String() + "/readyz"}, 50*time.Millisecond)
	waittest.Until(t, "the health check to take the first target out", func() bool { return r.IsDown(first) })
	dial := func() {
		t.Helper()
		c, err := net.Dial("tcp", r.Addr())
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	dial()
	waittest.Recv(t, accepted[1], "the connection to reach the second target")

	ready.Store(true)
	waittest.Until(t, "the health check to put the first target back", func() bool { return !r.IsDown(first) })
	dial()
	waittest.Recv(t, accepted[0], "the connection to reach the first target again")
}
