package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/internal/delayline"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// stoppedAutomator returns the address of an automator whose process is
// stopped (SIGSTOP): its kernel accepts connections into the listen
// backlog, and nothing ever answers on them. Nothing accepts from the
// listener; closing it at the test's end resets them.
func stoppedAutomator(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().String()
}

// TestAnAutomatorThatAcceptsAndNeverAnswersIsToldAsHung: a call to an
// automator whose process is stopped, so that its connections are accepted
// and nothing comes over them, tells OnUnreachable once, as hung, with
// the address, what the call does and how long nothing came; over TLS once
// the handshake has had nothing for its 5 s (KindSilent: the connection
// given up), over plaintext once the call's answer has not begun in its
// 10 s, nothing come meanwhile nor in answer to a probe on the connection
// (KindCallUnanswered; gRPC's setup would wait 20 s for the automator's
// settings). The call goes on trying, until RetryFor or the context's
// deadline when that comes first, which is then the Until told (the test
// ends it once told). Before, nothing was told: the connection was made.
func TestAnAutomatorThatAcceptsAndNeverAnswersIsToldAsHung(t *testing.T) {
	t.Parallel()
	ca, err := pki.NewCA("test CA", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	const id = "w_0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name, scheme, says string
		kind               client.UnreachableKind
		retryFor, ctxFor   time.Duration
	}{
		{name: "tls", scheme: "https://", says: "sent nothing for", kind: client.KindSilent, retryFor: time.Hour, ctxFor: 20 * time.Second},
		{name: "plaintext", scheme: "http://", says: "did not begin within", kind: client.KindCallUnanswered, retryFor: time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := tc.scheme + stoppedAutomator(t)
			var ctx context.Context
			var cancel context.CancelFunc
			if tc.ctxFor > 0 {
				ctx, cancel = context.WithTimeout(context.Background(), tc.ctxFor)
			} else {
				ctx, cancel = context.WithCancel(context.Background())
			}
			defer cancel()
			// What is told ends the call, which would go on trying.
			var told unreachables
			c, err := client.New(client.Config{Addresses: []string{url}, APIKey: "oak_x", CAPEM: ca.CertPEM, ServerName: "127.0.0.1", RetryFor: tc.retryFor,
				OnUnreachable: told.tellAndEnd(cancel)})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			_, err = c.Get(ctx, id)
			if err == nil {
				t.Fatal("Get of a stopped automator succeeded")
			}
			u := told.once(t, " before the call ended ("+err.Error()+")")
			if !u.Hung || u.Kind != tc.kind || u.Address != url || u.Err == nil || !strings.Contains(u.Err.Error(), tc.says) || u.Doing != "getting work "+id {
				t.Errorf("OnUnreachable told %+v; want hung, %v, the address %s, an error saying %q, doing %q", u, tc.kind, url, tc.says, "getting work "+id)
			}
			if end, ok := ctx.Deadline(); ok {
				if !u.Until.Equal(end) {
					t.Errorf("told it tries until %v; want the context's deadline, %v, sooner than RetryFor", u.Until, end)
				}
			} else if u.Until.Before(start.Add(tc.retryFor)) {
				t.Errorf("told it tries until %v; want RetryFor past the first failure", u.Until)
			}
		})
	}
}

// TestAWaitUnansweredPastItsUnitsDeadlineIsToldSo: a wait whose automator
// answers everything but the wait itself (its handler stuck, while its
// connection answers pings) is given up a second past the unit's deadline,
// and OnUnreachable says so in those words: the unit's deadline, on this
// clock, has passed and the automator has not told how the unit ended.
// Its Kind says the automator is there, the call stuck in it
// (KindCallStuck): with a unit long enough for a keepalive ping, the
// ping's answer came; with a short one, no ping due, the answer to a
// probe on the connection (before, that was told as KindCallUnanswered:
// stopped or stuck, the client could not tell). Before, it said "its
// answer did not begin within 3s", the whole wait (10m1s for a unit of 10
// minutes), accurate but odd for a wait, whose answer is not due before
// the unit ends.
func TestAWaitUnansweredPastItsUnitsDeadlineIsToldSo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		kind    client.UnreachableKind
		says    string
	}{
		{"a probe answered", 2 * time.Second, client.KindCallStuck, "; its connection answered meanwhile"},
		{"a ping answered", stuckUnitTimeout, client.KindCallStuck, "; its connection answered meanwhile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := automatortest.Start(t, automatortest.Options{Interceptors: []grpc.UnaryServerInterceptor{
				func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
					if info.FullMethod == automatorv1.AutomatorService_Wait_FullMethodName {
						<-ctx.Done()
						return nil, ctx.Err()
					}
					return h(ctx, req)
				},
			}})
			var told unreachables
			c, err := client.New(client.Config{Addresses: []string{a.URL()}, APIKey: a.APIKey, CAPEM: a.CAPEM, ServerName: "127.0.0.1", RetryFor: 10 * time.Second,
				OnUnreachable: told.tell})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			w, err := c.Submit(context.Background(), a.Account, client.Command{Script: "x.sh"}, client.WithTimeout(tc.timeout))
			if err != nil {
				t.Fatal(err)
			}
			// The unit times out (no proxy claims it), which the read that
			// resumes the wait learns.
			w, err = c.Wait(context.Background(), w.ID)
			if err != nil || w.State != client.StateTimedOut {
				t.Fatalf("Wait: %+v, %v; want the unit timed out", w, err)
			}
			u := told.once(t, "")
			// The deadline told is on this clock, the automator's as its answer
			// came: the same here, to a few milliseconds, so maybe the next second.
			var says []string
			for _, d := range []time.Time{w.Deadline, w.Deadline.Add(time.Second)} {
				says = append(says, "it has not told how the unit ended, though the unit's deadline ("+d.Local().Format(time.TimeOnly)+") has passed"+tc.says)
			}
			if !u.Hung || u.Kind != tc.kind || u.Err == nil || !slices.Contains(says, u.Err.Error()) {
				t.Errorf("OnUnreachable told %+v; want hung, %v, the error %q", u, tc.kind, says[0])
			}
		})
	}
}

// TestASlowAutomatorIsGivenLongerOnceATryWentUnanswered: an automator
// that answers every read and wait of a unit 1.5 s late (a loaded machine
// reading and opening a large result) is given up once a second past the
// unit's deadline, as hung, and then given twice as long: the read that
// follows is answered, and the caller learns how the unit ended (it timed
// out). Before, every try had the same second, and the call gave up after
// RetryFor without an answer, the automator having answered each try in
// time to be ignored.
func TestASlowAutomatorIsGivenLongerOnceATryWentUnanswered(t *testing.T) {
	t.Parallel()
	const late = 1500 * time.Millisecond
	a := automatortest.Start(t, automatortest.Options{Interceptors: []grpc.UnaryServerInterceptor{
		func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			resp, err := h(ctx, req)
			switch info.FullMethod {
			case automatorv1.AutomatorService_Wait_FullMethodName, automatorv1.AutomatorService_Get_FullMethodName:
				timer := time.NewTimer(late)
				defer timer.Stop()
				select {
				case <-timer.C:
				case <-ctx.Done():
				}
			}
			return resp, err
		},
	}})
	var told unreachables
	c, err := client.New(client.Config{Addresses: []string{a.URL()}, APIKey: a.APIKey, CAPEM: a.CAPEM, ServerName: "127.0.0.1", RetryFor: 5 * time.Second,
		OnUnreachable: told.tell})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.ExecuteOnProxy(context.Background(), a.Account, client.Command{Script: "x.sh"}, client.WithTimeout(time.Second))
	if !errors.Is(err, client.ErrTimeout) {
		t.Fatalf("ExecuteOnProxy of a unit no proxy claims: %v; want it timed out", err)
	}
	// The first try was given up, and told.
	if u := told.once(t, ""); !u.Hung {
		t.Errorf("OnUnreachable told %+v; want hung", u)
	}
}

// stuckUnitTimeout is the timeout of a unit whose wait is stuck in an
// automator long enough for the client's keepalive to ping it: it pings
// after 10 s without a word.
const stuckUnitTimeout = 15 * time.Second

// TestAWaitOnAnAutomatorThatStopsIsToldByItsKeepaliveBeforeTheDeadline: a
// wait whose automator stops while it waits (its connection open, nothing
// coming over it) is told by the keepalive, which pings after 10 s
// without a word (the least gRPC allows, and the automator's MinTime) and
// gives the connection up 10 s later: KindSilent, "nothing came over its
// connection", before the unit's deadline, 25 s away. Before, it pinged
// after 20 s, and the notice came only after the deadline, as a wait that
// has not told how the unit ended.
func TestAWaitOnAnAutomatorThatStopsIsToldByItsKeepaliveBeforeTheDeadline(t *testing.T) {
	t.Parallel()
	a, waits := startTellingWaits(t)
	r := startRelay(t, a.GRPCAddr)
	// What is told ends the wait, which would go on trying until RetryFor
	// past the unit's deadline, the relay hung.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var told unreachables
	c, err := client.New(client.Config{Addresses: []string{r.url()}, APIKey: a.APIKey, CAPEM: a.CAPEM, ServerName: "127.0.0.1", RetryFor: 2 * time.Second,
		OnUnreachable: told.tellAndEnd(cancel)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err := c.Submit(context.Background(), a.Account, client.Command{Script: "x.sh"}, client.WithTimeout(25*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Wait(ctx, w.ID)
		done <- err
	}()
	waittest.Recv(t, waits, "the wait to reach the automator")
	r.hang()
	if err := <-done; err == nil {
		t.Fatal("Wait on a stopped automator ended without an error")
	}
	u := told.once(t, "")
	if !u.Hung || u.Kind != client.KindSilent || u.Err == nil || !strings.Contains(u.Err.Error(), "nothing came over its connection for") {
		t.Errorf("OnUnreachable told %+v; want %v, the keepalive's \"nothing came over its connection for\"", u, client.KindSilent)
	}
}

// TestAShortCallIsToldStuckWhenItsAutomatorIsThere: a submit, a read or a
// cancel whose answer does not begin within its bound (10 s) is told as
// stuck in the automator (KindCallStuck, "its connection answered
// meanwhile") when the automator behind its connection answers a probe on
// it (its handlers stuck, waiting on its database say, while its process
// runs), and as unanswered (KindCallUnanswered) when nothing answers that
// either (the automator stopped, frozen, or cut off, its connection open).
// Each call here begins as the last answer came, over a link with a round
// trip of 500 ms: the keepalive pings 10 s after the last bytes came, the
// try's bound, so its answer comes after the try is given up. Before, both
// were told as unanswered: stopped or stuck, the client could not tell.
func TestAShortCallIsToldStuckWhenItsAutomatorIsThere(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		kind client.UnreachableKind
		says string
	}{
		{"stuck", client.KindCallStuck, "; its connection answered meanwhile"},
		{"stopped", client.KindCallUnanswered, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Each client's first submit (its key "first-...") is
			// answered; then the automator's handlers stick, or the relay
			// in front of it hangs.
			a := automatortest.Start(t, automatortest.Options{Interceptors: []grpc.UnaryServerInterceptor{
				func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
					if r, ok := req.(*automatorv1.ExecuteRequest); tc.kind == client.KindCallStuck && (!ok || !strings.HasPrefix(r.GetIdempotencyKey(), "first-")) {
						<-ctx.Done()
						return nil, ctx.Err()
					}
					return h(ctx, req)
				},
			}})
			calls := []string{"Submit", "Get", "Cancel"}
			errs := make(chan error, len(calls))
			for _, call := range calls {
				r := startRelay(t, delayline.Start(t, a.GRPCAddr, linkDelay))
				go func() { errs <- shortCallTold(a, r, call, tc.kind, tc.says) }()
			}
			for range calls {
				if err := <-errs; err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// shortCallTold makes call (Submit, Get or Cancel) to a over relay r, as
// soon as a first submit was answered over it; when the call is not a's
// to stick, the relay hangs then. It returns what is wrong with what
// OnUnreachable was told, which ends the call: hung, kind, "its answer did
// not begin within 10s" and says.
func shortCallTold(a *automatortest.Automator, r *relay, call string, kind client.UnreachableKind, says string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var told unreachables
	c, err := client.New(client.Config{Addresses: []string{r.url()}, APIKey: a.APIKey, CAPEM: a.CAPEM, ServerName: "127.0.0.1", RetryFor: time.Minute,
		OnUnreachable: told.tellAndEnd(cancel)})
	if err != nil {
		return err
	}
	defer c.Close()
	w, err := c.Submit(context.Background(), a.Account, client.Command{Script: "x.sh"}, client.WithIdempotencyKey("first-"+call))
	if err != nil {
		return err
	}
	if kind != client.KindCallStuck {
		r.hang()
	}
	var doing string
	switch call {
	case "Submit":
		doing = "submitting work to account \"" + a.Account + "\""
		_, err = c.Submit(ctx, a.Account, client.Command{Script: "x.sh"})
	case "Get":
		doing = "getting work " + w.ID
		_, err = c.Get(ctx, w.ID)
	case "Cancel":
		doing = "cancelling work " + w.ID
		_, err = c.Cancel(ctx, w.ID)
	}
	if err == nil {
		return fmt.Errorf("%s succeeded", call)
	}
	told.mu.Lock()
	defer told.mu.Unlock()
	// The time said is the try's bound, 10 s, however long a loaded
	// machine took to give it up.
	want := regexp.MustCompile(`^its answer did not begin within 10s` + regexp.QuoteMeta(says) + `$`)
	if len(told.told) != 1 {
		return fmt.Errorf("%s: OnUnreachable told %d times (%+v) before the call ended (%v); want once", call, len(told.told), told.told, err)
	}
	if u := told.told[0]; !u.Hung || u.Kind != kind || u.Address != r.url() || u.Err == nil || !want.MatchString(u.Err.Error()) || u.Doing != doing {
		return fmt.Errorf("%s: OnUnreachable told %+v; want hung, %v, the address %s, the error matching %q, doing %q", call, u, kind, r.url(), want, doing)
	}
	return nil
}

// linkDelay is each way's delay of a link with a round trip of 500 ms.
const linkDelay = 250 * time.Millisecond

// TestAWaitUnansweredBeforeItKnowsItsUnitsDeadlineNamesNoDeadline: a wait
// that does not know its unit's deadline yet (Wait, not ExecuteOnProxy)
// first reads it; when that read goes unanswered (its automator stopped),
// OnUnreachable says the answer did not begin in time, as for any call,
// and nothing of a deadline having passed: none is known.
func TestAWaitUnansweredBeforeItKnowsItsUnitsDeadlineNamesNoDeadline(t *testing.T) {
	t.Parallel()
	const id = "w_0123456789abcdef0123456789abcdef"
	url := "http://" + stoppedAutomator(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var told unreachables
	c, err := client.New(client.Config{Addresses: []string{url}, APIKey: "oak_x", RetryFor: time.Second, OnUnreachable: told.tellAndEnd(cancel)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err = c.Wait(ctx, id); err == nil {
		t.Fatal("Wait on a stopped automator succeeded")
	}
	u := told.once(t, " before the wait ended ("+err.Error()+")")
	if !u.Hung || u.Kind != client.KindCallUnanswered || u.Err == nil || !strings.Contains(u.Err.Error(), "did not begin within") ||
		strings.Contains(u.Err.Error(), "deadline") || u.Doing != "waiting for work "+id {
		t.Errorf("OnUnreachable told %+v; want hung, %v, an error saying its answer did not begin in time and nothing of a deadline, doing %q", u, client.KindCallUnanswered, "waiting for work "+id)
	}
}
