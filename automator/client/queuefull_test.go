package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/internal/grpcwire"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// refusingAutomator is an automator played by hand that refuses the first
// submits it gets with refusal, then queues (and, for Wait, succeeds) the
// unit; it records the idempotency key of every submit.
type refusingAutomator struct {
	automatorv1.UnimplementedAutomatorServiceServer
	refusal error
	refuse  int // how many submits are refused
	// refused, when set, is sent to as each refusal is answered.
	refused chan struct{}

	mu   sync.Mutex
	keys []string
}

func (a *refusingAutomator) Submit(_ context.Context, req *automatorv1.ExecuteRequest) (*automatorv1.WorkStatus, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.keys = append(a.keys, req.GetIdempotencyKey())
	if len(a.keys) <= a.refuse {
		if a.refused != nil {
			a.refused <- struct{}{}
		}
		return nil, a.refusal
	}
	return &automatorv1.WorkStatus{WorkId: "w_0000000000000000000000000000000a", Account: req.GetAccount(), State: automatorv1.State_STATE_QUEUED, Remaining: durationpb.New(time.Minute)}, nil
}

func (a *refusingAutomator) Wait(_ context.Context, req *automatorv1.WaitRequest) (*automatorv1.WorkStatus, error) {
	return &automatorv1.WorkStatus{WorkId: req.GetWorkId(), State: automatorv1.State_STATE_SUCCEEDED, Result: &automatorv1.Result{Stdout: []byte("ran\n")}}, nil
}

// submits returns the idempotency keys of the submits received so far.
func (a *refusingAutomator) submits() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.keys...)
}

// start serves a in plaintext on loopback and returns a client of it.
func (a *refusingAutomator) start(t *testing.T) *client.Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	automatorv1.RegisterAutomatorServiceServer(srv, a)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	c, err := client.New(client.Config{Addresses: []string{"http://" + lis.Addr().String()}, APIKey: "oak_test", RetryFor: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// refusal is a ResourceExhausted status with the details given.
func refusal(t *testing.T, msg string, details ...*errdetails.ErrorInfo) func(delay time.Duration) error {
	return func(delay time.Duration) error {
		st := status.New(codes.ResourceExhausted, msg)
		var err error
		if delay > 0 {
			if st, err = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)}); err != nil {
				t.Fatal(err)
			}
		}
		for _, d := range details {
			if st, err = st.WithDetails(d); err != nil {
				t.Fatal(err)
			}
		}
		return st.Err()
	}
}

var queueFullInfo = &errdetails.ErrorInfo{Reason: grpcwire.ReasonQueueFull, Domain: grpcwire.ErrorDomain, Metadata: map[string]string{"account": "acme"}}

// TestQueueFullIsErrQueueFullWithItsRetryDelay: a submit refused because
// the account's queue is at its cap is an error that matches
// ErrQueueFull, whose RetryDelay is the automator's (1 s); without a
// deadline on its context it is returned at once, not waited out.
func TestQueueFullIsErrQueueFullWithItsRetryDelay(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{Limits: server.Limits{MaxQueuedPerAccount: 1}})
	c := newClient(t, a)
	ctx := context.Background()
	if _, err := c.Submit(ctx, a.Account, client.Command{Script: "x.sh"}, client.WithTimeout(time.Minute)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Submit(ctx, a.Account, client.Command{Script: "x.sh"}, client.WithTimeout(time.Minute))
	if !errors.Is(err, client.ErrQueueFull) || status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a submit past the queue's cap: %v (%v); want ResourceExhausted matching ErrQueueFull", err, status.Code(err))
	}
	if d, ok := client.RetryDelay(err); !ok || d != time.Second {
		t.Errorf("RetryDelay(%v) = %v, %v; want 1s, true", err, d, ok)
	}
	if !strings.Contains(err.Error(), "max_queued_per_account") {
		t.Errorf("message %q does not name the limit", err)
	}
	for _, other := range []error{
		nil,
		errors.New("plain"),
		status.Error(codes.ResourceExhausted, "no RetryInfo (a full disk)"),
		status.Error(codes.Unavailable, "down"),
	} {
		if d, ok := client.RetryDelay(other); ok {
			t.Errorf("RetryDelay(%v) = %v, true; want none", other, d)
		}
		if errors.Is(other, client.ErrQueueFull) {
			t.Errorf("%v matches ErrQueueFull", other)
		}
	}
}

// TestQueueFullSubmitIsMadeAgainWithinTheDeadline: a submit refused for a
// full queue (which queued nothing) is made again after the automator's
// delay, with the same idempotency key, while the caller's context has a
// deadline that leaves time for it; Submit and ExecuteOnProxy alike.
func TestQueueFullSubmitIsMadeAgainWithinTheDeadline(t *testing.T) {
	t.Parallel()
	for _, call := range []string{"Submit", "ExecuteOnProxy"} {
		t.Run(call, func(t *testing.T) {
			a := &refusingAutomator{refusal: refusal(t, "account \"acme\" has as many units queued as its limit allows (1, limits.max_queued_per_account)", queueFullInfo)(10 * time.Millisecond), refuse: 2}
			c := a.start(t)
			ctx, cancel := context.WithTimeout(waittest.Context(t, call+" refused twice for a full queue to get through"), time.Minute)
			defer cancel()
			var err error
			if call == "Submit" {
				_, err = c.Submit(ctx, "acme", client.Command{Script: "x.sh"}, client.WithIdempotencyKey("k-1"))
			} else {
				var res client.Result
				res, err = c.ExecuteOnProxy(ctx, "acme", client.Command{Script: "x.sh"}, client.WithIdempotencyKey("k-1"))
				if err == nil && string(res.Stdout) != "ran\n" {
					t.Errorf("stdout %q, want the unit's", res.Stdout)
				}
			}
			if err != nil {
				t.Fatalf("%s refused twice, then accepted: %v", call, err)
			}
			if keys := a.submits(); strings.Join(keys, ",") != "k-1,k-1,k-1" {
				t.Errorf("submits with keys %q; want three with k-1", keys)
			}
		})
	}
}

// TestRefusalsNotMadeAgain: what the client returns at once, with one
// submit: a full queue when the context has no deadline, or one too near
// for the delay (100 ms at least); a refusal that only says when a wrong API key may fail
// again; and one that says no time (a full disk).
func TestRefusalsNotMadeAgain(t *testing.T) {
	// Not parallel: a refusal must arrive within a deadline of 90 ms,
	// a margin that load could break. When it does not, the case is
	// made again, up to 5 times: the refusal's wait is not what failed.
	full := refusal(t, "queue full", queueFullInfo)
	for _, tc := range []struct {
		name     string
		refusal  error
		deadline time.Duration // none when 0
		full     bool
		delay    time.Duration
	}{
		{"queue full, no deadline", full(10 * time.Millisecond), 0, true, 10 * time.Millisecond},
		{"queue full, deadline before the delay ends", full(time.Hour), time.Minute, true, time.Hour},
		// A delay of next to nothing is waited 100 ms at least, never
		// made a busy loop against the automator.
		{"queue full in 1ns, deadline before 100ms", full(time.Nanosecond), 90 * time.Millisecond, true, time.Nanosecond},
		{"too many failed authentications", refusal(t, "too many failed authentications", &errdetails.ErrorInfo{Reason: grpcwire.ReasonTooManyFailedAuthentications, Domain: grpcwire.ErrorDomain})(10 * time.Millisecond), time.Minute, false, 10 * time.Millisecond},
		{"queue full from an older automator, without ErrorInfo", refusal(t, "queue full")(10 * time.Millisecond), time.Minute, false, 10 * time.Millisecond},
		{"full disk", refusal(t, "disk full")(0), time.Minute, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			submit := func() (*refusingAutomator, error) {
				a := &refusingAutomator{refusal: tc.refusal, refuse: 1}
				c := a.start(t)
				ctx := waittest.Context(t, "a refusal to be returned")
				// The connection is made before a deadline starts: on a
				// loaded machine its setup alone can outlast 90 ms. Get
				// is not one of the automator's methods here
				// (Unimplemented).
				if _, err := c.Get(ctx, "w_connect"); status.Code(err) != codes.Unimplemented {
					t.Fatalf("Get: %v; want Unimplemented once connected", err)
				}
				if tc.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.deadline)
					defer cancel()
				}
				_, err := c.Submit(ctx, "acme", client.Command{Script: "x.sh"})
				return a, err
			}
			a, err := submit()
			for try := 2; try <= 5 && status.Code(err) != codes.ResourceExhausted && errors.Is(err, context.DeadlineExceeded); try++ {
				t.Logf("the refusal did not arrive within the deadline of %v (%v): the machine is loaded; try %d", tc.deadline, err, try)
				a, err = submit()
			}
			if status.Code(err) != codes.ResourceExhausted || errors.Is(err, client.ErrQueueFull) != tc.full {
				t.Errorf("Submit: %v; want the refusal, matching ErrQueueFull: %v", err, tc.full)
			}
			if d, ok := client.RetryDelay(err); d != tc.delay || ok != (tc.delay > 0) {
				t.Errorf("RetryDelay(%v) = %v, %v; want %v", err, d, ok, tc.delay)
			}
			if n := len(a.submits()); n != 1 {
				t.Errorf("%d submits; want 1", n)
			}
		})
	}
}

// TestQueueFullWaitEndsWithTheContext: a caller that gives up while the
// client waits to submit again (an hour, here) gets its context's error at
// once, not ErrCancelled: no unit was queued, and no other submit made.
func TestQueueFullWaitEndsWithTheContext(t *testing.T) {
	t.Parallel()
	a := &refusingAutomator{refusal: refusal(t, "queue full", queueFullInfo)(time.Hour), refuse: 1, refused: make(chan struct{}, 1)}
	c := a.start(t)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(24*time.Hour))
	done := make(chan error, 1)
	go func() {
		_, err := c.ExecuteOnProxy(ctx, "acme", client.Command{Script: "x.sh"})
		done <- err
	}()
	waittest.Recv(t, a.refused, "the first submit to be refused")
	cancel()
	err := waittest.Recv(t, done, "ExecuteOnProxy to return once its context is cancelled")
	if !errors.Is(err, context.Canceled) || errors.Is(err, client.ErrCancelled) {
		t.Errorf("ExecuteOnProxy cancelled while waiting to submit again: %v; want context.Canceled, not ErrCancelled (no unit)", err)
	}
	if n := len(a.submits()); n != 1 {
		t.Errorf("%d submits; want 1", n)
	}
}
