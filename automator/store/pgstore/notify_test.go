package pgstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
)

// listening starts s.Listen in the background, delivering events to the
// returned channel, and waits until it listens.
func listening(t *testing.T, s *Store) <-chan Event {
	t.Helper()
	events := make(chan Event, 100)
	ready := make(chan struct{}, 1)
	s.testHookListening = func() { ready <- struct{}{} }
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.Listen(ctx, func(e Event) { events <- e }); err != nil {
			t.Errorf("Listen: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("Listen was not ready within 10s")
	}
	return events
}

// receive returns the next event other than EventResumed (which every
// Listen sends as it starts listening).
func receive(t *testing.T, events <-chan Event, what string) Event {
	t.Helper()
	for {
		select {
		case e := <-events:
			if e.Kind == EventResumed {
				continue
			}
			return e
		case <-time.After(10 * time.Second):
			t.Fatalf("no event within 10s: waiting for %s", what)
			return Event{}
		}
	}
}

func TestPublishReachesTheOtherReplicaNotItself(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	a, b := open(t, dsn), open(t, dsn)
	fromA := listening(t, a)
	fromB := listening(t, b)

	want := Event{Kind: EventWorkEnded, Account: "acme", WorkID: "w_1", InstanceID: "host-a"}
	if err := a.Publish(t.Context(), want); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if got := receive(t, fromB, "a's event on b"); got != want {
		t.Errorf("b received %+v, want %+v", got, want)
	}
	polled := Event{Kind: EventRunPolled, Account: "acme", InstanceID: "host-a", RunID: "run-1", PollSeq: 12}
	if err := a.Publish(t.Context(), polled); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if got := receive(t, fromB, "a's run event on b"); got != polled {
		t.Errorf("b received %+v, want %+v", got, polled)
	}
	// b's event reaches a; a's own event, published before it, did not:
	// notifications arrive in commit order.
	mark := Event{Kind: EventWorkQueued, Account: "globex"}
	if err := b.Publish(t.Context(), mark); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if got := receive(t, fromA, "b's event on a"); got != mark {
		t.Errorf("a received %+v first, want b's %+v (a must skip its own events)", got, mark)
	}
}

// TestSchemasDoNotHearEachOther: automators of two schemas in one database
// have channels of their own.
func TestSchemasDoNotHearEachOther(t *testing.T) {
	t.Parallel()
	x := open(t, pgtest.DSN(t))
	y1, y2 := func() (*Store, *Store) { dsn := pgtest.DSN(t); return open(t, dsn), open(t, dsn) }()
	events := listening(t, y1)
	if err := x.Publish(t.Context(), Event{Kind: EventWorkQueued, Account: "other-schema"}); err != nil {
		t.Fatal(err)
	}
	mark := Event{Kind: EventWorkQueued, Account: "same-schema"}
	if err := y2.Publish(t.Context(), mark); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, events, "the same schema's event"); got != mark {
		t.Errorf("received %+v, want %+v: another schema's event leaked in", got, mark)
	}
}

// TestListenAfterALostConnectionCatchesUp: the listening connection is
// killed; a unit ends while nobody listens (and nothing is published); the
// next Listen replays its end from the table, and the account's queued work.
func TestListenAfterALostConnectionCatchesUp(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	b, app := openNamed(t, dsn)
	a := open(t, dsn)

	ready := make(chan struct{}, 1)
	b.testHookListening = func() { ready <- struct{}{} }
	events := make(chan Event, 100)
	failed := make(chan error, 1)
	again := make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		failed <- b.Listen(ctx, func(e Event) { events <- e })
		select {
		case <-again:
		case <-ctx.Done():
			return
		}
		if err := b.Listen(ctx, func(e Event) { events <- e }); err != nil {
			t.Errorf("second Listen: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	wait := func(c <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatalf("timed out waiting for %s", what)
		}
	}
	wait(ready, "the first Listen")

	var n int
	if err := a.pool.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app+" listen").Scan(&n); err != nil || n != 1 {
		t.Fatalf("terminating b's listening connection: %d terminated, %v", n, err)
	}
	select {
	case err := <-failed:
		if err == nil {
			t.Fatal("Listen returned nil after its connection was killed, want the error")
		}
		t.Logf("Listen returned: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Listen did not return after its connection was killed")
	}

	// While nobody listens: a unit ends, another is queued.
	endOneQueueOne(t, a)
	close(again)
	wait(ready, "the second Listen")
	wantReplayed(t, events, "the catch-up")

	// And it listens again.
	want := Event{Kind: EventWorkQueued, Account: "after"}
	if err := a.Publish(t.Context(), want); err != nil {
		t.Fatal(err)
	}
	if e := receive(t, events, "an event after reconnecting"); e != want {
		t.Errorf("after reconnecting: received %+v, want %+v", e, want)
	}
}

// TestTheFirstListenCatchesUpSinceOpen: what another replica did between
// this Store's Open and its first Listen (a unit ended, one queued) is
// replayed when that Listen starts, as after a lost connection.
func TestTheFirstListenCatchesUpSinceOpen(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	a, b := open(t, dsn), open(t, dsn)
	endOneQueueOne(t, a)
	wantReplayed(t, listening(t, b), "the first Listen") // once b listens and has caught up
}

// TestTheCatchUpReplaysOneEndPerClaimerNotOnePerUnit: however many units
// ended in the gap, the catch-up replays one ended event per instance that
// had claimed some (to wake its polls), none per unit: its size, in memory
// and in events, is bounded by the instances, not by the units. The
// units' waiters are woken by the EventResumed that ends it.
func TestTheCatchUpReplaysOneEndPerClaimerNotOnePerUnit(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	a, b := open(t, dsn), open(t, dsn)
	now := time.Now()
	if _, err := a.AccountCreate(t.Context(), store.AccountCreateParams{Name: "acme", TokenHash: []byte("h"), KeyID: 1, SealedKey: []byte("k"), Now: now}); err != nil {
		t.Fatal(err)
	}
	for i := range 41 {
		enqueue(t, a, fmt.Sprintf("w-%02d", i), now.Add(time.Duration(i)*time.Millisecond), now.Add(time.Hour))
	}
	claim(t, a, "i-1", 30, now)
	claim(t, a, "i-2", 10, now)
	for i := range 41 { // the last one ends unclaimed
		if _, err := a.WorkCancel(t.Context(), store.WorkCancelParams{ID: fmt.Sprintf("w-%02d", i), Reason: "test", Now: now}); err != nil {
			t.Fatal(err)
		}
	}

	events := listening(t, b)
	got := map[Event]int{}
	var last Event
	for len(events) > 0 {
		last = <-events
		got[last]++
	}
	if last.Kind != EventResumed {
		t.Errorf("the catch-up did not end with %s: the last event was %+v", EventResumed, last)
	}
	delete(got, Event{Kind: EventResumed})
	want := map[Event]int{
		{Kind: EventWorkEnded, Account: "acme", InstanceID: "i-1"}: 1,
		{Kind: EventWorkEnded, Account: "acme", InstanceID: "i-2"}: 1,
	}
	if !maps.Equal(got, want) {
		t.Errorf("the catch-up replayed %v, want %v", got, want)
	}
}

// endOneQueueOne makes account acme on s with one unit claimed by
// instance i-1 and ended (w-ended) and one queued. Times are real: the
// catch-up window is on the wall clock.
func endOneQueueOne(t *testing.T, s *Store) {
	t.Helper()
	now := time.Now()
	if _, err := s.AccountCreate(t.Context(), store.AccountCreateParams{Name: "acme", TokenHash: []byte("h"), KeyID: 1, SealedKey: []byte("k"), Now: now}); err != nil {
		t.Fatal(err)
	}
	enqueue(t, s, "w-ended", now, now.Add(time.Hour))
	claim(t, s, "i-1", 1, now)
	enqueue(t, s, "w-queued", now.Add(time.Millisecond), now.Add(time.Hour))
	if _, err := s.WorkCancel(t.Context(), store.WorkCancelParams{ID: "w-ended", Reason: "test", Now: now}); err != nil {
		t.Fatal(err)
	}
}

// claim claims n units of acme for instance on s.
func claim(t *testing.T, s *Store, instance string, n int, now time.Time) {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("claim-%s-%d", instance, i)
	}
	ws, err := s.WorkClaim(t.Context(), store.WorkClaimParams{Account: "acme", InstanceID: instance, Max: n, ClaimIDs: ids, Now: now})
	if err != nil || len(ws) != n {
		t.Fatalf("WorkClaim for %s: %d units, %v; want %d", instance, len(ws), err, n)
	}
}

// wantReplayed checks that events, drained, hold the replay of what
// endOneQueueOne did, followed by EventResumed: the listener reads again
// what it waits for, in case the replay missed an end.
func wantReplayed(t *testing.T, events <-chan Event, by string) {
	t.Helper()
	got := map[Event]int{} // the position of each event's last arrival
	var last Event
	for i := 0; len(events) > 0; i++ {
		last = <-events
		got[last] = i
	}
	if last.Kind != EventResumed {
		t.Errorf("%s did not end with %s: the last event was %+v", by, EventResumed, last)
	}
	for _, want := range []Event{
		{Kind: EventWorkEnded, Account: "acme", InstanceID: "i-1"},
		{Kind: EventWorkQueued, Account: "acme"},
	} {
		if _, ok := got[want]; !ok {
			t.Errorf("%s did not replay %+v; it replayed %v", by, want, got)
		}
	}
}

// openNamed opens a store on dsn under an application name of its own,
// which it returns: its pool's sessions go by that name, its Listen's by
// the name and " listen".
func openNamed(t *testing.T, dsn string) (*Store, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	app := "pgstore-test-" + randomID()
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return open(t, u.String()), app
}

// TestListenWhoseCatchUpFailsLeavesItToTheNext: a Listen that reconnects
// but cannot replay the gap (the database is still recovering, say)
// returns its error, and the next Listen replays that gap: the moment the
// lost connection was last known to work is kept until a catch-up from it
// succeeds.
func TestListenWhoseCatchUpFailsLeavesItToTheNext(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	b, app := openNamed(t, dsn)
	a := open(t, dsn)
	ctx := t.Context()
	now := time.Now()
	if _, err := a.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte("h"), KeyID: 1, SealedKey: []byte("k"), Now: now}); err != nil {
		t.Fatal(err)
	}
	enqueue(t, a, "w-ended", now.Add(-time.Hour), now.Add(time.Hour))
	claim(t, a, "i-1", 1, now.Add(-time.Hour))

	// b's Listen, called again each time next is sent.
	ready := make(chan struct{}, 1)
	b.testHookListening = func() { ready <- struct{}{} }
	events := make(chan Event, 100)
	returned := make(chan error)
	next := make(chan struct{})
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			err := b.Listen(lctx, func(e Event) { events <- e })
			select {
			case returned <- err:
			case <-lctx.Done():
				return
			}
			select {
			case <-next:
			case <-lctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	wait := func(c <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatalf("timed out waiting for %s", what)
		}
	}
	listenFails := func(what string) {
		t.Helper()
		select {
		case err := <-returned:
			if err == nil {
				t.Fatalf("%s: Listen returned nil, want its error", what)
			}
			t.Logf("%s: Listen returned: %v", what, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: Listen did not return", what)
		}
	}
	wait(ready, "the first Listen")

	var n int
	if err := a.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app+" listen").Scan(&n); err != nil || n != 1 {
		t.Fatalf("terminating b's listening connection: %d terminated, %v", n, err)
	}
	listenFails("its connection killed")
	// That connection was last known to work a minute ago (its pings
	// stopped answering, reconnecting took a while), and the unit ended
	// half a minute ago, in the gap, unannounced.
	b.listenMu.Lock()
	b.heard = now.Add(-time.Minute)
	b.listenMu.Unlock()
	if _, err := a.WorkCancel(ctx, store.WorkCancelParams{ID: "w-ended", Reason: "test", Now: now.Add(-30 * time.Second)}); err != nil {
		t.Fatal(err)
	}

	// The next Listen connects and listens, but its catch-up fails: it
	// waits on a lock of the work table and its session is ended.
	lock, err := a.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(context.Background())
	if _, err := lock.Exec(ctx, `LOCK TABLE work IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	var lockPID int
	if err := lock.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&lockPID); err != nil {
		t.Fatal(err)
	}
	next <- struct{}{}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := a.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1 AND $2 = ANY(pg_blocking_pids(pid))`, app, lockPID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the catch-up never waited on the lock")
		}
		time.Sleep(5 * time.Millisecond)
	}
	listenFails("its catch-up's session killed")
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// The one after that replays the gap.
	next <- struct{}{}
	wait(ready, "the third Listen")
	want := Event{Kind: EventWorkEnded, Account: "acme", InstanceID: "i-1"}
	var got []Event
	for len(events) > 0 {
		if e := <-events; e == want {
			return
		} else {
			got = append(got, e)
		}
	}
	t.Errorf("after a failed catch-up, the next Listen did not replay %+v; it replayed %v", want, got)
}

func TestListenReturnsNilWhenCancelled(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.DSN(t))
	ctx, cancel := context.WithCancel(t.Context())
	ready := make(chan struct{}, 1)
	s.testHookListening = func() { ready <- struct{}{} }
	errc := make(chan error, 1)
	go func() { errc <- s.Listen(ctx, func(Event) {}) }()
	<-ready
	cancel()
	select {
	case err := <-errc:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Listen after cancel = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Listen did not return after its context was cancelled")
	}
}

// TestAFailedNotifyIsSentAgain: the session that runs a NOTIFY is ended
// just before the statement reaches it; the statement is sent again on
// another connection, and the other replica hears the event.
func TestAFailedNotifyIsSentAgain(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	a, b := open(t, dsn), open(t, dsn)
	fromA := listening(t, b)

	var sessions []uint32 // only the one sending goroutine calls the hook
	a.testHookNotify = func(pid uint32) {
		sessions = append(sessions, pid)
		if len(sessions) > 1 {
			return
		}
		// Waits until the session has ended.
		var ended bool
		if err := b.pool.QueryRow(t.Context(), `SELECT pg_terminate_backend($1, 10000)`, pid).Scan(&ended); err != nil || !ended {
			t.Errorf("ending session %d: %v, %v", pid, ended, err)
		}
	}
	want := Event{Kind: EventWorkQueued, Account: "acme"}
	if err := a.Publish(t.Context(), want); err != nil {
		t.Fatalf("Publish whose first NOTIFY failed: %v", err)
	}
	if got := receive(t, fromA, "a's event on b"); got != want {
		t.Errorf("b received %+v, want %+v", got, want)
	}
	if len(sessions) != 2 || sessions[0] == sessions[1] {
		t.Errorf("NOTIFY sent by sessions %v, want twice: on the ended one, then on another", sessions)
	}
}

// TestAPublishLeavesItsSessionDurable: the NOTIFY transaction alone commits
// without waiting for its WAL flush; the pooled session it ran on goes back
// with synchronous_commit as it was, so the claims and results written on it
// later are durable before they are answered (guarantee 3).
func TestAPublishLeavesItsSessionDurable(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	// The test cluster runs with synchronous_commit off; these sessions
	// start with it on.
	q := u.Query()
	q.Set("synchronous_commit", "on")
	u.RawQuery = q.Encode()
	s := open(t, u.String())
	var pid uint32 // set by the one sending goroutine before Publish returns
	s.testHookNotify = func(p uint32) { pid = p }
	if err := s.Publish(t.Context(), Event{Kind: EventWorkQueued, Account: "acme"}); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	conns := s.pool.AcquireAllIdle(t.Context())
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	found := false
	for _, c := range conns {
		if c.Conn().PgConn().PID() != pid {
			continue
		}
		found = true
		var got string
		if err := c.QueryRow(t.Context(), `SHOW synchronous_commit`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != "on" {
			t.Errorf("synchronous_commit of the session the NOTIFY ran on is %q after it, want on (as the session began)", got)
		}
	}
	if !found {
		t.Fatalf("the session the NOTIFY ran on (pid %d) is not idle in the pool", pid)
	}
}

// TestAListenWhoseCatchUpGetsNoAnswerGivesUp: a Listen whose catch-up
// gets no answer (here it waits on a lock; on a connection cut off without
// a word it would wait for the operating system, a quarter of an hour)
// returns its error once its start's bound has passed, so that the next
// Listen tries again, rather than leave the replica deaf meanwhile.
func TestAListenWhoseCatchUpGetsNoAnswerGivesUp(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	a, b := open(t, dsn), open(t, dsn)
	// Long enough for the connection and LISTEN to be done first on a
	// loaded machine (at 300 ms they could time out instead, and the
	// catch-up was never sent): only the catch-up goes unanswered.
	b.listenSetup = 3 * time.Second
	lock, err := a.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback(context.Background())
	if _, err := lock.Exec(t.Context(), `LOCK TABLE work IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	returned := make(chan error, 1)
	go func() { returned <- b.Listen(t.Context(), func(Event) {}) }()
	select {
	case err := <-returned:
		if err == nil || !strings.Contains(err.Error(), "catching up") {
			t.Fatalf("Listen returned %v, want the error of its catch-up", err)
		}
		t.Logf("Listen returned: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Listen still waits for its catch-up after 10s")
	}
	if err := lock.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	endOneQueueOne(t, a)
	b.listenSetup = defaultListenSetup
	wantReplayed(t, listening(t, b), "the next Listen")
}
