package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/internal/grpcwire"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// thinUplinkAutomator stands for an automator behind a caller's uplink of
// rate bytes a second: a submit is queued when its deadline leaves the time
// its request takes to send, and otherwise runs until its deadline and
// fails, as a call cut off mid-upload does.
type thinUplinkAutomator struct {
	automatorv1.UnimplementedAutomatorServiceServer
	rate int

	mu      sync.Mutex
	submits int
}

func (a *thinUplinkAutomator) Submit(ctx context.Context, req *automatorv1.ExecuteRequest) (*automatorv1.WorkStatus, error) {
	a.mu.Lock()
	a.submits++
	a.mu.Unlock()
	takes := time.Duration(proto.Size(req)) * time.Second / time.Duration(a.rate)
	if end, ok := ctx.Deadline(); ok && time.Until(end) < takes {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return &automatorv1.WorkStatus{WorkId: "w_0000000000000000000000000000000b", Account: req.GetAccount(), State: automatorv1.State_STATE_QUEUED, Remaining: durationpb.New(time.Minute)}, nil
}

// TestASubmitWithALargeStdinIsGivenTheTimeItsSizeTakes: a submit carrying
// 1 MiB of stdin over an uplink that takes 16 s to send it (about
// 512 kbit/s) is given that time, and sent once, rather than cut off after
// the 10 s of a try and sent again from its first byte until the client
// gives up.
func TestASubmitWithALargeStdinIsGivenTheTimeItsSizeTakes(t *testing.T) {
	t.Parallel()
	a := &thinUplinkAutomator{rate: 64 << 10}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(8 << 20))
	automatorv1.RegisterAutomatorServiceServer(srv, a)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	c, err := client.New(client.Config{Addresses: []string{"http://" + lis.Addr().String()}, APIKey: "oak_test", RetryFor: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err := c.Submit(context.Background(), "acme", client.Command{Script: "x.sh"}, client.WithStdin(make([]byte, 1<<20)))
	if err != nil {
		t.Fatalf("submit with 1 MiB of stdin: %v", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.submits != 1 || w.ID == "" {
		t.Fatalf("%d submits, work %q; want one, queued", a.submits, w.ID)
	}
}

// slowReads is a connection whose reads come at rate bytes a second, as
// over a caller's thin downlink; onRead, when set, is told of each read.
type slowReads struct {
	net.Conn
	rate   int
	onRead func(n int)
}

func (c slowReads) Read(p []byte) (int, error) {
	p = p[:min(len(p), c.rate/20)] // 50 ms of the link at a time
	n, err := c.Conn.Read(p)
	time.Sleep(time.Duration(n) * time.Second / time.Duration(c.rate))
	if c.onRead != nil {
		c.onRead(n)
	}
	return n, err
}

// busyLinkAutomator answers every call at once: a Get of bigID with a
// result of 4 MiB; a Submit with a unit whose deadline is now; a Wait
// with that unit succeeded. It counts the other calls.
type busyLinkAutomator struct {
	automatorv1.UnimplementedAutomatorServiceServer

	mu          sync.Mutex
	waits, gets int
}

const (
	bigID   = "w_0000000000000000000000000000000c"
	smallID = "w_0000000000000000000000000000000d"
)

func (a *busyLinkAutomator) Get(_ context.Context, req *automatorv1.GetRequest) (*automatorv1.WorkStatus, error) {
	if req.GetWorkId() == bigID {
		return &automatorv1.WorkStatus{WorkId: bigID, Account: "acme", State: automatorv1.State_STATE_SUCCEEDED, Result: &automatorv1.Result{Stdout: make([]byte, 4<<20)}}, nil
	}
	a.mu.Lock()
	a.gets++
	a.mu.Unlock()
	return &automatorv1.WorkStatus{WorkId: smallID, Account: "acme", State: automatorv1.State_STATE_QUEUED, Remaining: durationpb.New(0)}, nil
}

func (a *busyLinkAutomator) Submit(context.Context, *automatorv1.ExecuteRequest) (*automatorv1.WorkStatus, error) {
	return &automatorv1.WorkStatus{WorkId: smallID, Account: "acme", State: automatorv1.State_STATE_QUEUED, Remaining: durationpb.New(0)}, nil
}

func (a *busyLinkAutomator) Wait(context.Context, *automatorv1.WaitRequest) (*automatorv1.WorkStatus, error) {
	a.mu.Lock()
	a.waits++
	a.mu.Unlock()
	return &automatorv1.WorkStatus{WorkId: smallID, Account: "acme", State: automatorv1.State_STATE_SUCCEEDED, Result: &automatorv1.Result{Stdout: []byte("ok")}}, nil
}

// TestAnAnswerQueuedBehindAnotherOnAThinLinkIsWaitedFor: over a caller's
// downlink of 512 KiB/s, a wait whose bound is a second (its unit's
// deadline has passed) has its answer queued behind about 1 MiB of
// another call's 4 MiB answer (what the automator may send of it before
// the caller asks for more), 2 s of the link. The wait is not given up at
// its bound while its connection is delivering: it returns the unit,
// having asked once, and nothing is told as unreachable. Before, it was
// given up at its bound, the automator told as not answering, and asked
// again.
func TestAnAnswerQueuedBehindAnotherOnAThinLinkIsWaitedFor(t *testing.T) {
	t.Parallel()
	a := &busyLinkAutomator{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpcwire.ServerOptions()...)
	automatorv1.RegisterAutomatorServiceServer(srv, a)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })

	// flowing is closed once 256 KiB of the large answer came: the
	// automator is sending it, as fast as the link takes it.
	flowing := make(chan struct{})
	var got atomic.Int64
	var once sync.Once
	var told unreachables
	var d net.Dialer
	c, err := client.New(client.Config{
		Addresses: []string{"http://" + lis.Addr().String()}, APIKey: "oak_test", RetryFor: time.Minute,
		OnUnreachable: told.tell,
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return slowReads{Conn: conn, rate: 512 << 10, onRead: func(n int) {
				if got.Add(int64(n)) >= 256<<10 {
					once.Do(func() { close(flowing) })
				}
			}}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	big := make(chan error, 1)
	go func() {
		w, err := c.Get(ctx, bigID)
		if err == nil && len(w.Result.Stdout) != 4<<20 {
			err = fmt.Errorf("stdout of %d bytes, want %d", len(w.Result.Stdout), 4<<20)
		}
		big <- err
	}()
	waittest.Recv(t, flowing, "the large answer to begin to come")
	res, err := c.ExecuteOnProxy(ctx, "acme", client.Command{Script: "x.sh"})
	if err != nil || string(res.Stdout) != "ok" {
		t.Fatalf("ExecuteOnProxy: %q, %v; want its result", res.Stdout, err)
	}
	if err := waittest.Recv(t, big, "the large answer"); err != nil {
		t.Fatalf("Get of the large answer: %v", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.waits != 1 || a.gets != 0 {
		t.Errorf("the automator was asked %d waits and %d reads of the unit; want one wait", a.waits, a.gets)
	}
	told.mu.Lock()
	defer told.mu.Unlock()
	if len(told.told) != 0 {
		t.Errorf("told as unreachable: %+v; want nothing told", told.told)
	}
}

// TestALargeResultThatEndsNearTheDeadlineIsReadWholeOverAThinLink: a
// unit's result of 2 MiB, ready before the unit's deadline of 4 s, takes
// 8 s to reach a caller over its downlink (256 KiB/s): the wait is given
// the time its answer takes once that answer has begun, and returns the
// result, rather than being cut off a second past the deadline and read
// again from its first byte until the client gives up (the unit having
// succeeded). The 4 s are for the test's proxy to claim and complete the
// unit on a loaded machine (a deadline of 1 s was too short at a load
// average of 20, and 4 s once too); when the unit times out first, the
// test gives the next one 6 s, then 9 s (a clean-clone `make test` missed
// 4 and 6 s once). The answer's 8 s end past the first two deadlines and
// their second whatever the claim and completion took, and past the
// third on a machine slow enough to have missed the other two. The
// client retries for 30 s: under load (the race detector beside 16 busy
// loops) the in-process automator took 2 s to read and open the result,
// past the wait's second, and the tries that follow are given longer
// (TestASlowAutomatorIsGivenLongerOnceATryWentUnanswered); with 2 s, the
// client gave up before.
func TestALargeResultThatEndsNearTheDeadlineIsReadWholeOverAThinLink(t *testing.T) {
	// Not parallel: the test's proxy must claim and complete the unit
	// within its 4 s deadline, a margin that load could break.
	a := automatortest.Start(t, automatortest.Options{})
	var d net.Dialer
	c, err := client.New(client.Config{
		Addresses: []string{a.URL()}, APIKey: a.APIKey, CAPEM: a.CAPEM, ServerName: "127.0.0.1", RetryFor: 30 * time.Second,
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return slowReads{Conn: conn, rate: 256 << 10}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	type outcome struct {
		res client.Result
		err error
	}
	p := newFakeProxy(t, a)
	for _, timeout := range []time.Duration{4 * time.Second, 6 * time.Second, 9 * time.Second} {
		done := make(chan outcome, 1)
		go func() {
			res, err := c.ExecuteOnProxy(context.Background(), "acme", client.Command{Script: "large.sh"}, client.WithTimeout(timeout))
			done <- outcome{res, err}
		}()
		err := p.tryComplete(p.claim(), strings.Repeat("x", 2<<20))
		o := waittest.Recv(t, done, "ExecuteOnProxy to return")
		if status.Code(err) == codes.FailedPrecondition && errors.Is(o.err, client.ErrTimeout) {
			t.Logf("the unit timed out before the test's proxy completed it (%v): the machine is loaded; again with a longer deadline", err)
			continue
		}
		if err != nil {
			t.Fatalf("complete: %v", err)
		}
		if o.err != nil {
			t.Fatalf("a unit that succeeded with 2 MiB of stdout, read over a thin downlink: %v; want its result", o.err)
		}
		if len(o.res.Stdout) != 2<<20 {
			t.Fatalf("stdout of %d bytes, want %d", len(o.res.Stdout), 2<<20)
		}
		return
	}
	t.Fatal("every unit timed out before the test's proxy completed it")
}
