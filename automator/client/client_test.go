package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/internal/closedport"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

func TestExecuteOnProxyReturnsTheResult(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	scripts := t.TempDir()
	automatortest.WriteScript(t, scripts, "greet.sh", `read name; echo "hello $name ($1, $GREETING) from $PROXY_INSTANCE_ID"; echo warn >&2; exit 3`)
	a.StartProxy(t, automatortest.ProxyOptions{InstanceID: "a", ScriptsDir: scripts, AllowedEnv: []string{"GREETING"}}).WaitPolling(t)
	c := newClient(t, a)

	res, err := c.ExecuteOnProxy(waittest.Context(t, "ExecuteOnProxy of greet.sh to return its result"), a.Account, client.Command{Script: "greet.sh", Args: []string{"x"}},
		client.WithStdin([]byte("world\n")), client.WithEnv(map[string]string{"GREETING": "hi"}), client.WithTimeout(30*time.Second))
	if err != nil {
		t.Fatalf("ExecuteOnProxy: %v", err)
	}
	if got, want := string(res.Stdout), "hello world (x, hi) from a\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	if string(res.Stderr) != "warn\n" || res.ExitCode != 3 || res.InstanceID != "a" || res.WorkID == "" {
		t.Errorf("result %+v: want stderr warn, exit code 3 (a result, not an error), instance a, a work id", res)
	}
}

// TestExecuteOnProxyTellsWhenItsUnitIsQueued: WithOnQueued is called once,
// before the wait ends, with the unit's id and its deadline on this
// clock, so that a caller that stops waiting can say which unit it leaves
// (automator exec does at a second Ctrl-C).
func TestExecuteOnProxyTellsWhenItsUnitIsQueued(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	scripts := t.TempDir()
	automatortest.WriteScript(t, scripts, "gate.sh", `read line; echo "$line"`)
	a.StartProxy(t, automatortest.ProxyOptions{InstanceID: "a", ScriptsDir: scripts}).WaitPolling(t)
	c := newClient(t, a)
	type queued struct {
		id       string
		deadline time.Time
	}
	told := make(chan queued, 2)
	const timeout = 30 * time.Second
	start := time.Now()
	type outcome struct {
		res client.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := c.ExecuteOnProxy(waittest.Context(t, "ExecuteOnProxy of gate.sh"), a.Account, client.Command{Script: "gate.sh"},
			client.WithStdin([]byte("go\n")), client.WithTimeout(timeout),
			client.WithOnQueued(func(id string, deadline time.Time) { told <- queued{id, deadline} }))
		done <- outcome{res, err}
	}()
	q := waittest.Recv(t, told, "WithOnQueued's call")
	o := waittest.Recv(t, done, "ExecuteOnProxy to return")
	if o.err != nil {
		t.Fatalf("ExecuteOnProxy: %v", o.err)
	}
	if q.id != o.res.WorkID || q.deadline.Before(start.Add(timeout-time.Second)) || q.deadline.After(time.Now().Add(timeout)) {
		t.Errorf("told %s, deadline %v; want the unit's id %s and its deadline, %v from the call", q.id, q.deadline, o.res.WorkID, timeout)
	}
	select {
	case <-told:
		t.Error("WithOnQueued's function was called twice")
	default:
	}
}

// TestPingReturnsTheInstanceThatAnswered: the built-in @ping, run through
// executeOnProxy, names the instance that claimed the unit.
func TestPingReturnsTheInstanceThatAnswered(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	for _, id := range []string{"ping-a", "ping-b"} {
		a.StartProxy(t, automatortest.ProxyOptions{InstanceID: id, ScriptsDir: t.TempDir()}).WaitPolling(t)
	}
	c := newClient(t, a)
	for range 6 {
		res, err := c.ExecuteOnProxy(waittest.Context(t, "ExecuteOnProxy of @ping to return its result"), a.Account, client.Command{Script: "@ping"})
		if err != nil {
			t.Fatalf("@ping: %v", err)
		}
		if res.InstanceID != "ping-a" && res.InstanceID != "ping-b" {
			t.Fatalf("@ping answered by %q, not one of the instances", res.InstanceID)
		}
		if !strings.Contains(string(res.Stdout), "instance_id="+res.InstanceID+"\n") {
			t.Fatalf("@ping claimed by %s says:\n%s", res.InstanceID, res.Stdout)
		}
		for _, field := range []string{"hostname=test-host\n", "version=test\n", "uptime="} {
			if !strings.Contains(string(res.Stdout), field) {
				t.Errorf("@ping output lacks %q:\n%s", field, res.Stdout)
			}
		}
		w, err := c.Get(context.Background(), res.WorkID)
		if err != nil || w.InstanceID != res.InstanceID {
			t.Fatalf("Get(%s): claimer %q, %v; want %s", res.WorkID, w.InstanceID, err, res.InstanceID)
		}
	}
}

// Each outcome that is not a result is its own typed error, carrying the
// work id and the reason.
func TestTypedErrors(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	ctx := context.Background()
	c := newClient(t, a)

	check := func(t *testing.T, err, want error, state client.State, reason string) {
		t.Helper()
		for _, e := range []error{client.ErrTimeout, client.ErrFailed, client.ErrCancelled} {
			if got := errors.Is(err, e); got != (e == want) {
				t.Errorf("errors.Is(%v, %v) = %v", err, e, got)
			}
		}
		var we *client.WorkError
		if !errors.As(err, &we) {
			t.Fatalf("%v is not a *client.WorkError", err)
		}
		if we.WorkID == "" || we.Account != a.Account || we.State != state || !strings.Contains(we.Reason, reason) {
			t.Errorf("WorkError %+v: want a work id, account %s, state %s, reason containing %q", we, a.Account, state, reason)
		}
		if !strings.Contains(err.Error(), we.WorkID) {
			t.Errorf("message %q does not name the work", err)
		}
	}

	t.Run("timeout", func(t *testing.T) {
		// No instance polls: the unit times out at its deadline.
		_, err := c.ExecuteOnProxy(waittest.Context(t, "ExecuteOnProxy of a unit nobody claims to return at its 300ms deadline"), a.Account, client.Command{Script: "x.sh"}, client.WithTimeout(300*time.Millisecond))
		check(t, err, client.ErrTimeout, client.StateTimedOut, "no instance claimed it")
	})

	t.Run("failed", func(t *testing.T) {
		// An automator of its own: the poll its proxy has pending when
		// stopped may still be waiting on the automator's side (until the
		// cancel reaches it), and would take the next unit queued there,
		// whose answer nobody then reads.
		a := automatortest.Start(t, automatortest.Options{})
		c := newClient(t, a)
		p := a.StartProxy(t, automatortest.ProxyOptions{InstanceID: "a", ScriptsDir: t.TempDir()})
		p.WaitPolling(t)
		_, err := c.ExecuteOnProxy(waittest.Context(t, "ExecuteOnProxy of a script not deployed to return its failure"), a.Account, client.Command{Script: "not-deployed.sh"}, client.WithTimeout(30*time.Second))
		check(t, err, client.ErrFailed, client.StateFailed, "not-deployed.sh")
		p.Stop()
	})

	t.Run("cancelled by another caller", func(t *testing.T) {
		fp := newFakeProxy(t, a)
		errc := make(chan error, 1)
		go func() {
			_, err := c.ExecuteOnProxy(ctx, a.Account, client.Command{Script: "x.sh"}, client.WithTimeout(30*time.Second))
			errc <- err
		}()
		claim := fp.claim()
		if _, err := newClient(t, a).Cancel(ctx, claim.GetWorkId()); err != nil {
			t.Fatal(err)
		}
		err := waittest.Recv(t, errc, "ExecuteOnProxy to return once another caller cancelled its unit")
		check(t, err, client.ErrCancelled, client.StateCancelled, "cancelled by the caller")
		if errors.Is(err, context.Canceled) {
			t.Errorf("%v matches context.Canceled, but this caller's context did not end", err)
		}
	})

	t.Run("cancelled when the caller's context ends", func(t *testing.T) {
		fp := newFakeProxy(t, a)
		cctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() {
			_, err := c.ExecuteOnProxy(cctx, a.Account, client.Command{Script: "x.sh"}, client.WithTimeout(30*time.Second))
			errc <- err
		}()
		claim := fp.claim()
		cancel()
		err := waittest.Recv(t, errc, "ExecuteOnProxy to return once its caller's context ended")
		check(t, err, client.ErrCancelled, client.StateCancelled, "cancelled")
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%v does not match context.Canceled", err)
		}
		w, gerr := c.Get(ctx, claim.GetWorkId())
		if gerr != nil || w.State != client.StateCancelled {
			t.Fatalf("the unit after the caller gave up: %v, %v; want cancelled", w.State, gerr)
		}
	})

	t.Run("the call itself", func(t *testing.T) {
		_, err := c.ExecuteOnProxy(ctx, "nobody", client.Command{Script: "x.sh"})
		if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), `"nobody"`) {
			t.Errorf("unknown account: %v; want NotFound naming it", err)
		}
		bad, err := client.New(client.Config{Addresses: []string{a.URL()}, APIKey: "oak_wrong", CAPEM: a.CAPEM})
		if err != nil {
			t.Fatal(err)
		}
		defer bad.Close()
		_, err = bad.ExecuteOnProxy(ctx, a.Account, client.Command{Script: "x.sh"})
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("wrong API key: %v; want Unauthenticated", err)
		}
		for _, e := range []error{client.ErrTimeout, client.ErrFailed, client.ErrCancelled} {
			if errors.Is(err, e) {
				t.Errorf("a refused call matches %v", e)
			}
		}
	})
}

// TestConnectionCutMidWaitEndsInTheResult: the connection carrying the
// blocking wait is cut; the client waits again by work id (through the same
// address, or the next one when the first is down) and gets the result,
// with exactly one unit created.
func TestConnectionCutMidWaitEndsInTheResult(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// down: after the cut the relay accepts no more connections.
		down bool
	}{
		{"reconnect through the same address", false},
		{"fail over to the next address", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, waits := startTellingWaits(t)
			r := startRelay(t, a.GRPCAddr)
			addrs := []string{r.url()} // the relay only: a new connection through it
			if tc.down {
				addrs = append(addrs, a.URL())
			}
			c := newClient(t, a, addrs...)
			fp := newFakeProxy(t, a)

			type outcome struct {
				res client.Result
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := c.ExecuteOnProxy(context.Background(), a.Account, client.Command{Script: "x.sh"}, client.WithTimeout(time.Minute))
				done <- outcome{res, err}
			}()
			claim := fp.claim()
			// nextWait returns the id of the next Wait call to reach the
			// automator, failing if ExecuteOnProxy returns instead.
			nextWait := func(what string) string {
				t.Helper()
				select {
				case id := <-waits:
					return id
				case o := <-done:
					t.Fatalf("ExecuteOnProxy returned (%+v, %v) before %s", o.res, o.err, what)
				case <-time.After(20 * time.Second):
					t.Fatalf("no %s within 20s", what)
				}
				return ""
			}
			if id := nextWait("the first wait"); id != claim.GetWorkId() {
				t.Fatalf("waiting for %s, claimed %s", id, claim.GetWorkId())
			}
			if tc.down {
				r.close()
			} else {
				r.cut()
			}
			if id := nextWait("a wait on a new connection"); id != claim.GetWorkId() {
				t.Fatalf("waiting again for %s, want %s", id, claim.GetWorkId())
			}
			fp.complete(claim, "done once")
			o := waittest.Recv(t, done, "ExecuteOnProxy to return the result posted after its connection was cut")
			if o.err != nil {
				t.Fatalf("ExecuteOnProxy: %v", o.err)
			}
			if string(o.res.Stdout) != "done once" || o.res.WorkID != claim.GetWorkId() {
				t.Fatalf("result %+v, want the claimed unit's", o.res)
			}
			if n := a.CountWork(t); n != 1 {
				t.Fatalf("%d units of work in the store, want exactly 1", n)
			}
		})
	}
}

// TestSubmitWhoseAnswerIsLostIsRetriedWithTheSameKey: the automator queues
// the unit but its answer never arrives; the client submits again with the
// same idempotency key and gets the same unit, not a second one.
func TestSubmitWhoseAnswerIsLostIsRetriedWithTheSameKey(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var keys []string
	a := automatortest.Start(t, automatortest.Options{Interceptors: []grpc.UnaryServerInterceptor{
		func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			resp, err := h(ctx, req)
			if info.FullMethod != automatorv1.AutomatorService_Submit_FullMethodName {
				return resp, err
			}
			mu.Lock()
			defer mu.Unlock()
			keys = append(keys, req.(*automatorv1.ExecuteRequest).GetIdempotencyKey())
			if len(keys) == 1 {
				return nil, status.Error(codes.Unavailable, "connection lost before the answer")
			}
			return resp, err
		},
	}})
	scripts := t.TempDir()
	automatortest.WriteScript(t, scripts, "once.sh", `echo ran >> "$1"; echo ok`)
	a.StartProxy(t, automatortest.ProxyOptions{InstanceID: "a", ScriptsDir: scripts}).WaitPolling(t)
	runs := filepath.Join(t.TempDir(), "runs")

	res, err := newClient(t, a).ExecuteOnProxy(waittest.Context(t, "ExecuteOnProxy of once.sh to return its result"), a.Account, client.Command{Script: "once.sh", Args: []string{runs}})
	if err != nil {
		t.Fatalf("ExecuteOnProxy: %v", err)
	}
	if string(res.Stdout) != "ok\n" {
		t.Fatalf("stdout %q", res.Stdout)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
		t.Fatalf("submits with keys %q; want two with one generated key", keys)
	}
	if n := a.CountWork(t); n != 1 {
		t.Fatalf("%d units of work, want 1", n)
	}
	if b, _ := os.ReadFile(runs); string(b) != "ran\n" {
		t.Fatalf("the script ran %d times, want once", strings.Count(string(b), "ran"))
	}
}

// TestConcurrentSubmitsWithOneKeyMakeOneUnit: 20 callers submit with one
// idempotency key at once; one unit exists and all of them get it.
func TestConcurrentSubmitsWithOneKeyMakeOneUnit(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	c := newClient(t, a)
	const n = 20
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			w, err := c.Submit(context.Background(), a.Account, client.Command{Script: "x.sh", Args: []string{"same"}}, client.WithIdempotencyKey("order-42"))
			ids[i], errs[i] = w.ID, err
		}()
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("submit %d: %v", i, errs[i])
		}
		if ids[i] != ids[0] {
			t.Fatalf("submit %d got unit %s, submit 0 got %s: want one unit for all", i, ids[i], ids[0])
		}
	}
	if got := a.CountWork(t); got != 1 {
		t.Fatalf("%d units of work, want 1", got)
	}
}

// TestRepeatedKeyReturnsTheFirstOutcome: a second executeOnProxy with a key
// already used returns the first unit's outcome; the script runs once.
func TestRepeatedKeyReturnsTheFirstOutcome(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	scripts := t.TempDir()
	automatortest.WriteScript(t, scripts, "once.sh", `echo ran >> "$1"; echo "run by $PROXY_WORK_ID"`)
	a.StartProxy(t, automatortest.ProxyOptions{InstanceID: "a", ScriptsDir: scripts}).WaitPolling(t)
	c := newClient(t, a)
	runs := filepath.Join(t.TempDir(), "runs")
	cmd := client.Command{Script: "once.sh", Args: []string{runs}}

	first, err := c.ExecuteOnProxy(waittest.Context(t, "the first ExecuteOnProxy of once.sh to return its result"), a.Account, cmd, client.WithIdempotencyKey("deploy-7"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.ExecuteOnProxy(waittest.Context(t, "ExecuteOnProxy again with the same key to return the first result"), a.Account, cmd, client.WithIdempotencyKey("deploy-7"))
	if err != nil {
		t.Fatal(err)
	}
	if again.WorkID != first.WorkID || string(again.Stdout) != string(first.Stdout) {
		t.Fatalf("repeat: unit %s %q; want the first, %s %q", again.WorkID, again.Stdout, first.WorkID, first.Stdout)
	}
	if b, _ := os.ReadFile(runs); string(b) != "ran\n" {
		t.Fatalf("the script ran %d times, want once", strings.Count(string(b), "ran"))
	}
	_, err = c.Submit(context.Background(), a.Account, client.Command{Script: "other.sh"}, client.WithIdempotencyKey("deploy-7"))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), first.WorkID) {
		t.Fatalf("the key reused for another command: %v; want InvalidArgument naming %s", err, first.WorkID)
	}
	if n := a.CountWork(t); n != 1 {
		t.Fatalf("%d units of work, want 1", n)
	}
}

// TestKeyOutsideTheRetentionWindowMakesANewUnit: the server's retention
// option bounds how long a key holds.
func TestKeyOutsideTheRetentionWindowMakesANewUnit(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{IdempotencyRetention: time.Nanosecond})
	c := newClient(t, a)
	cmd := client.Command{Script: "x.sh"}
	first, err := c.Submit(context.Background(), a.Account, cmd, client.WithIdempotencyKey("k"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Submit(context.Background(), a.Account, cmd, client.WithIdempotencyKey("k"))
	if err != nil {
		t.Fatal(err)
	}
	if first.ID == second.ID {
		t.Fatalf("the key still named unit %s after its retention window", first.ID)
	}
}

func TestBadIdempotencyKeysAreRefused(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	c := newClient(t, a)
	for _, k := range []string{strings.Repeat("k", 129), "has space", "tab\t", "é"} {
		_, err := c.Submit(context.Background(), a.Account, client.Command{Script: "x.sh"}, client.WithIdempotencyKey(k))
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "idempotency_key") {
			t.Errorf("key %q: %v; want InvalidArgument naming idempotency_key", k, err)
		}
	}
	if n := a.CountWork(t); n != 0 {
		t.Fatalf("%d units queued with refused keys", n)
	}
}

// TestFailoverSkipsAnAutomatorThatIsDown: the first address refuses
// connections; every call goes to the second.
func TestFailoverSkipsAnAutomatorThatIsDown(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	down := startRelay(t, a.GRPCAddr)
	down.close()
	c := newClient(t, a, down.url(), a.URL())
	w, err := c.Submit(context.Background(), a.Account, client.Command{Script: "x.sh"})
	if err != nil {
		t.Fatalf("submit with the first automator down: %v", err)
	}
	if _, err := c.Cancel(context.Background(), w.ID); err != nil {
		t.Fatal(err)
	}
	got, err := c.Wait(waittest.Context(t, "Wait on the cancelled unit to return"), w.ID)
	if err != nil || got.State != client.StateCancelled || !errors.Is(got.Err(), client.ErrCancelled) {
		t.Fatalf("wait: %v %v; want cancelled", got.State, err)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	t.Parallel()
	_, err := client.New(client.Config{Addresses: []string{"automator:8443", "https://x"}})
	for _, want := range []string{"Addresses[0]", "Addresses[1]", "APIKey"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
	_, err = client.New(client.Config{Addresses: []string{"https://h:1"}, APIKey: "k"})
	if err == nil || !strings.Contains(err.Error(), "CA") {
		t.Errorf("https without a CA: %v", err)
	}
	if _, err := client.New(client.Config{Addresses: []string{"https://h:1"}, APIKey: "k", CAFile: filepath.Join(t.TempDir(), "missing.pem")}); err == nil {
		t.Error("a missing CA file was accepted")
	}
	if _, err := client.New(client.Config{Addresses: []string{"http://127.0.0.1:1"}, APIKey: "k", RetryFor: -time.Nanosecond}); err == nil || !strings.Contains(err.Error(), "RetryFor") {
		t.Errorf("a negative RetryFor: %v, want an error naming RetryFor", err)
	}
	c, err := client.New(client.Config{Addresses: []string{"http://127.0.0.1:1"}, APIKey: "k"})
	if err != nil {
		t.Fatalf("plaintext needs no CA: %v", err)
	}
	c.Close()
}

func ExampleClient_ExecuteOnProxy() {
	c, err := client.New(client.Config{
		Addresses: []string{"https://automator.example:8443", "https://automator-2.example:8443"},
		APIKey:    os.Getenv("AUTOMATOR_API_KEY"),
		CAFile:    "ca.pem",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := c.ExecuteOnProxy(ctx, "acme", client.Command{Script: "hello.sh", Args: []string{"world"}},
		client.WithTimeout(5*time.Minute), client.WithIdempotencyKey("hello-2026-01-01"))
	var we *client.WorkError
	switch {
	case errors.As(err, &we) && errors.Is(err, client.ErrTimeout):
		fmt.Println("no result before the deadline:", we.WorkID, we.Reason)
	case errors.Is(err, client.ErrFailed), errors.Is(err, client.ErrCancelled):
		fmt.Println(err)
	case err != nil:
		fmt.Println("the call failed:", err)
	default:
		fmt.Printf("instance %s exited %d: %s", res.InstanceID, res.ExitCode, res.Stdout)
	}
}

// TestWaitCutAgainAndAgainIsResumedEachTime: a wait the automator holds
// for longer than RetryFor and that is then cut (a load balancer that cuts
// long calls, one replica restarted after another) is resumed every time:
// the automator answered in between, so the retry budget starts again from
// each cut, not from the first.
func TestWaitCutAgainAndAgainIsResumedEachTime(t *testing.T) {
	// Not parallel: each resumed wait must reach the automator within
	// RetryFor (1 s) of its cut, a margin that load could break.
	a, waits := startTellingWaits(t)
	r := startRelay(t, a.GRPCAddr)
	const retryFor = time.Second
	// A cut of a connection made is not an automator that cannot be
	// connected to: OnUnreachable is told nothing.
	var unreachable atomic.Int32
	c, err := client.New(client.Config{Addresses: []string{r.url()}, APIKey: a.APIKey, CAPEM: a.CAPEM, ServerName: "127.0.0.1", RetryFor: retryFor,
		OnUnreachable: func(client.Unreachable) { unreachable.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		if n := unreachable.Load(); n != 0 {
			t.Errorf("OnUnreachable told %d times of a wait cut while its automator could be connected to; want none", n)
		}
	})
	w, err := c.Submit(context.Background(), a.Account, client.Command{Script: "x.sh"}, client.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		w   client.Work
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		got, err := c.Wait(context.Background(), w.ID)
		done <- outcome{got, err}
	}()
	nextWait := func(what string) {
		t.Helper()
		select {
		case id := <-waits:
			if id != w.ID {
				t.Fatalf("waiting for %s, want %s", id, w.ID)
			}
		case o := <-done:
			t.Fatalf("Wait returned (%v, %v) before %s", o.w.State, o.err, what)
		case <-time.After(20 * time.Second):
			t.Fatalf("no %s within 20s", what)
		}
	}
	nextWait("the first wait")
	for cut := 1; cut <= 3; cut++ {
		if cut > 1 {
			// The scenario: the resumed wait is held past the budget
			// counted from the previous cut.
			time.Sleep(retryFor + retryFor/2)
		}
		r.cut()
		nextWait(fmt.Sprintf("the wait resumed after cut %d", cut))
	}
	if _, err := newClient(t, a).Cancel(context.Background(), w.ID); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil || o.w.State != client.StateCancelled {
		t.Fatalf("Wait: %v, %v; want the unit, cancelled", o.w.State, o.err)
	}
}

// TestCertificateThatDoesNotVerifyIsNotRetried: an automator whose
// certificate does not verify (another CA, or a name it does not carry) is
// a mistake of configuration that retrying cannot mend: the call fails at
// once naming the address and the certificate, instead of retrying for
// RetryFor and then saying no automator answered. Another address that
// verifies still takes the call.
func TestCertificateThatDoesNotVerifyIsNotRetried(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	other := automatortest.Start(t, automatortest.Options{})
	for _, tc := range []struct {
		name       string
		ca         []byte
		serverName string
		want       string
	}{
		{"another CA", other.CAPEM, "", "unknown authority"},
		{"a name the certificate lacks", a.CAPEM, "automator.example", "automator.example"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := client.New(client.Config{Addresses: []string{a.URL()}, APIKey: a.APIKey, CAPEM: tc.ca, ServerName: tc.serverName, RetryFor: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// The bound only stops a retrying client: it is no measure.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err = c.Submit(ctx, a.Account, client.Command{Script: "x.sh"})
			if err == nil || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("submit: %v; want a certificate error at once", err)
			}
			for _, want := range []string{a.URL(), "certificate", tc.want} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q does not name %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "no automator answered") {
				t.Errorf("%q says no automator answered", err)
			}
		})
	}
	t.Run("another address verifies", func(t *testing.T) {
		c, err := client.New(client.Config{Addresses: []string{other.URL(), a.URL()}, APIKey: a.APIKey, CAPEM: a.CAPEM, RetryFor: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		w, err := c.Submit(context.Background(), a.Account, client.Command{Script: "x.sh"})
		if err != nil {
			t.Fatalf("submit with the first address's certificate not verifying: %v", err)
		}
		if _, err := c.Cancel(context.Background(), w.ID); err != nil {
			t.Fatal(err)
		}
	})
}

// TestPlaintextIsForLoopbackOnly: an automator serves plaintext on loopback
// only, so an http:// address elsewhere would send the API key in clear
// across a network to whatever answers there; it is refused, naming the
// address. Loopback addresses are accepted.
func TestPlaintextIsForLoopbackOnly(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{Plaintext: true})
	// The relayed name stands for a remote host that answers plaintext.
	_, port, _ := net.SplitHostPort(a.GRPCAddr)
	relayed := func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", a.GRPCAddr)
	}
	for _, addr := range []string{"http://automator.example:" + port, "http://192.0.2.7:" + port, "http://[2001:db8::1]:" + port} {
		c, err := client.New(client.Config{Addresses: []string{addr}, APIKey: a.APIKey, Dial: relayed})
		if err == nil {
			_, cerr := c.Submit(context.Background(), a.Account, client.Command{Script: "x.sh"})
			c.Close()
			t.Errorf("%s accepted (a submit through it: %v), sending the API key in clear", addr, cerr)
			continue
		}
		if !strings.Contains(err.Error(), "Addresses[0]") || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("%s: %v; want an error naming Addresses[0] and loopback", addr, err)
		}
	}
	for _, addr := range []string{a.URL(), "http://localhost:" + port, "http://[::1]:" + port} {
		c, err := client.New(client.Config{Addresses: []string{addr}, APIKey: a.APIKey, Dial: relayed})
		if err != nil {
			t.Errorf("%s refused: %v", addr, err)
			continue
		}
		c.Close()
	}
}

// TestNegativeTimeoutIsRefused: a timeout below zero (a remaining time
// computed from a deadline already past, say) is refused with the
// automator's message naming the bound, not replaced by the 5-minute
// default; zero means the default.
func TestNegativeTimeoutIsRefused(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	c := newClient(t, a)
	_, err := c.Submit(context.Background(), a.Account, client.Command{Script: "x.sh"}, client.WithTimeout(-time.Second))
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "timeout") {
		t.Errorf("WithTimeout(-1s): %v; want InvalidArgument naming the timeout", err)
	}
	if n := a.CountWork(t); n != 0 {
		t.Fatalf("%d units queued with a negative timeout", n)
	}
	w, err := c.Submit(context.Background(), a.Account, client.Command{Script: "x.sh"}, client.WithTimeout(0))
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Deadline.Sub(w.QueuedAt); got != 5*time.Minute {
		t.Errorf("WithTimeout(0): deadline %v after queueing; want the default, 5m", got)
	}
}

// startTellingWaits starts an automator that sends the work id of every
// Wait it is called with on waits (up to 16 not yet received).
func startTellingWaits(t *testing.T) (a *automatortest.Automator, waits <-chan string) {
	t.Helper()
	ch := make(chan string, 16)
	a = automatortest.Start(t, automatortest.Options{Interceptors: []grpc.UnaryServerInterceptor{
		func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if info.FullMethod == automatorv1.AutomatorService_Wait_FullMethodName {
				ch <- req.(*automatorv1.WaitRequest).GetWorkId()
			}
			return h(ctx, req)
		},
	}})
	return a, ch
}

// TestCallEndedCancelledByTheOtherSideIsRetried: a load balancer that
// resets a stream with RST_STREAM CANCEL (or an automator whose handler
// ended so) shows as Canceled although this caller's context is alive.
// That is a dropped call like any other, and every call here is safe to
// repeat: the wait resumes and ends in the unit's outcome. Once the
// client is closed, a Canceled call is not retried.
func TestCallEndedCancelledByTheOtherSideIsRetried(t *testing.T) {
	t.Parallel()
	var cancels atomic.Int32
	a := automatortest.Start(t, automatortest.Options{Interceptors: []grpc.UnaryServerInterceptor{
		func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if (info.FullMethod == automatorv1.AutomatorService_Wait_FullMethodName || info.FullMethod == automatorv1.AutomatorService_Submit_FullMethodName) && cancels.Add(1) <= 4 {
				return nil, status.Error(codes.Canceled, "stream terminated by RST_STREAM with error code: CANCEL")
			}
			return h(ctx, req)
		},
	}})
	p := newFakeProxy(t, a)
	c := newClient(t, a)
	done := make(chan error, 1)
	var res client.Result
	go func() {
		var err error
		res, err = c.ExecuteOnProxy(context.Background(), a.Account, client.Command{Script: "x.sh"})
		done <- err
	}()
	p.complete(p.claim(), "after the cancels")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ExecuteOnProxy: %v; want the result (calls ended Canceled by the other side are retried)", err)
		}
		if string(res.Stdout) != "after the cancels" {
			t.Fatalf("stdout %q", res.Stdout)
		}
	case <-time.After(waittest.Bound):
		t.Fatal("ExecuteOnProxy did not return")
	}
	if n := cancels.Load(); n < 4 {
		t.Fatalf("%d calls cancelled; the test meant 4", n)
	}

	// An hour of retries, so that a closed client that retried would
	// outlast the test's bound.
	closed, err := client.New(client.Config{Addresses: []string{a.URL()}, APIKey: a.APIKey, CAPEM: a.CAPEM, ServerName: "127.0.0.1", RetryFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	errc := make(chan error, 1)
	go func() {
		_, err := closed.Get(context.Background(), res.WorkID)
		errc <- err
	}()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("Get on a closed client succeeded")
		}
	case <-time.After(waittest.Bound):
		t.Fatal("Get on a closed client was retried instead of failing")
	}
}

// TestWaitOnAHungAutomatorLearnsTheEndFromTheNext: the automator a caller
// waits on hangs (stopped, or frozen: its connection stays open, nothing
// answers, nothing is reset), and the unit times out meanwhile (another
// replica's sweeper would end it). The client gives the hung automator up
// once the unit's deadline has passed and learns the end from the next
// address, as executeOnProxy's "at the deadline, a timeout error" asks;
// it does not wait for the keepalive to give the connection up (10 s of
// silence and 10 s for the ping's answer).
func TestWaitOnAHungAutomatorLearnsTheEndFromTheNext(t *testing.T) {
	t.Parallel()
	for _, call := range []string{"Wait", "ExecuteOnProxy"} {
		t.Run(call, func(t *testing.T) {
			t.Parallel()
			a, waits := startTellingWaits(t)
			r := startRelay(t, a.GRPCAddr)
			c := newClient(t, a, r.url(), a.URL())
			done := make(chan error, 1)
			const timeout = 2 * time.Second
			go func() {
				var w client.Work
				var err error
				if call == "Wait" {
					if w, err = c.Submit(context.Background(), a.Account, client.Command{Script: "x.sh"}, client.WithTimeout(timeout)); err == nil {
						w, err = c.Wait(context.Background(), w.ID)
					}
					if err == nil {
						err = w.Err()
					}
				} else {
					_, err = c.ExecuteOnProxy(context.Background(), a.Account, client.Command{Script: "x.sh"}, client.WithTimeout(timeout))
				}
				done <- err
			}()
			waittest.Recv(t, waits, "the wait to reach the automator")
			r.hang()
			// The keepalive would give the connection up after 20 s;
			// the unit's deadline is 2 s away.
			select {
			case err := <-done:
				if !errors.Is(err, client.ErrTimeout) {
					t.Fatalf("%s: %v; want the unit's timeout", call, err)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("%s still waits on the hung automator 20s after it hung, past the unit's deadline", call)
			}
		})
	}
}

// TestSubmitToAHungAutomatorGoesToTheNext: a submit, a read and a cancel
// are answered at once by an automator that works; one that hangs
// (stopped, frozen: its connection open, nothing answered, nothing reset)
// is given up after a bound of its own (tryBound) and the call made on the
// next address, with the same idempotency key, instead of waiting for the
// keepalive to give the connection up (20 s) or the automator to resume.
func TestSubmitToAHungAutomatorGoesToTheNext(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	r := startRelay(t, a.GRPCAddr)
	// A client per call, each of whose calls starts on the first address,
	// which answers (its connection is up); then that address hangs.
	var first client.Work
	clients := make([]*client.Client, 3)
	for i := range clients {
		clients[i] = newClient(t, a, r.url(), a.URL())
		w, err := clients[i].Submit(context.Background(), a.Account, client.Command{Script: "x.sh"})
		if err != nil {
			t.Fatal(err)
		}
		first = w
	}
	r.hang()
	calls := []struct {
		name string
		do   func(c *client.Client) error
	}{
		{"Submit", func(c *client.Client) error {
			w, err := c.Submit(context.Background(), a.Account, client.Command{Script: "x.sh"}, client.WithIdempotencyKey("after-the-hang"))
			if err == nil && w.ID == "" {
				err = errors.New("no work id")
			}
			return err
		}},
		{"Get", func(c *client.Client) error { _, err := c.Get(context.Background(), first.ID); return err }},
		{"Cancel", func(c *client.Client) error { _, err := c.Cancel(context.Background(), first.ID); return err }},
	}
	done := make(chan error, len(calls))
	for i, call := range calls {
		go func() {
			if err := call.do(clients[i]); err != nil {
				done <- fmt.Errorf("%s with the first automator hung: %w; want it made on the next", call.name, err)
				return
			}
			done <- nil
		}()
	}
	timeout := time.After(25 * time.Second)
	for range calls {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			t.Fatal("a call still waits on the hung automator 25 s after it hung")
		}
	}
	if n := a.CountWork(t); n != 4 {
		t.Fatalf("%d units queued; want 4 (three before the hang, one after)", n)
	}
}

// TestAnAutomatorThatCannotBeConnectedToIsToldOnce: a call to an address
// nothing listens on tells OnUnreachable once, after its first failed try,
// with the address, the dial's error (KindNotConnected) and when the call
// stops trying; the
// call goes on trying until then.
func TestAnAutomatorThatCannotBeConnectedToIsToldOnce(t *testing.T) {
	t.Parallel()
	url := "http://" + closedport.Addr(t)
	var told unreachables
	const retryFor = 2 * time.Second
	c, err := client.New(client.Config{Addresses: []string{url}, APIKey: "oak_x", RetryFor: retryFor,
		OnUnreachable: told.tell})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, err = c.Get(context.Background(), "w_0123456789abcdef0123456789abcdef")
	if err == nil || !strings.Contains(err.Error(), "giving up") {
		t.Fatalf("Get of an automator nothing listens for: %v; want it to give up once RetryFor has passed", err)
	}
	u := told.once(t, "")
	if u.Address != url || u.Err == nil || !strings.Contains(u.Err.Error(), "connection refused") || u.Kind != client.KindNotConnected || u.Until.Before(start.Add(retryFor)) {
		t.Errorf("OnUnreachable told %+v; want the address %s, the dial's error (connection refused), KindNotConnected, and the end of the retries, RetryFor past the first failure", u, url)
	}
}
