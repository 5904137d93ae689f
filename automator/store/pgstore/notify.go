package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// EventKind says what happened to the queue.
type EventKind string

const (
	// EventWorkQueued: a unit was queued on Account.
	EventWorkQueued EventKind = "queued"
	// EventWorkEnded: unit WorkID of Account reached a terminal state;
	// InstanceID is its claimer, if it was claimed. In a Listen's replay
	// of a gap WorkID is empty: one event stands for every unit of
	// InstanceID's that ended in it (EventResumed wakes their waiters).
	EventWorkEnded EventKind = "ended"
	// EventRunPolled: run RunID of instance InstanceID of Account polled
	// on a new connection. (A replica that predates it ignores it.)
	EventRunPolled EventKind = "polled"
	// EventResumed: Listen listens, and has replayed what it may have
	// missed before (Listen). Never published.
	EventResumed EventKind = "resumed"
)

// Event is a change of the queue that automators sharing the database must
// hear of, so their long polls and waiting callers wake without polling.
// It carries names and ids only, never a command, result or credential:
// every session of the database may LISTEN.
type Event struct {
	Kind       EventKind
	Account    string
	WorkID     string
	InstanceID string
	RunID      string
	// PollSeq is the number of RunID's poll (EventRunPolled; 0: none).
	PollSeq int64
}

// payload is an Event on the wire: a few hundred bytes of JSON at most
// (NOTIFY allows 8000).
type payload struct {
	Origin     string    `json:"o"`
	Kind       EventKind `json:"k"`
	Account    string    `json:"a"`
	WorkID     string    `json:"w,omitempty"`
	InstanceID string    `json:"i,omitempty"`
	RunID      string    `json:"r,omitempty"`
	PollSeq    int64     `json:"p,omitempty"`
	// Seq numbers the events of one publisher. PostgreSQL drops a
	// notification equal to another of the same transaction, and Publish
	// sends several in one (two units queued on one account would make
	// one wake-up): the number keeps them apart. Listeners ignore it.
	Seq uint64 `json:"n,omitempty"`
}

// Timings of Listen.
const (
	// listenPing is how long Listen waits for a notification before it
	// checks that its connection still works.
	listenPing = 15 * time.Second
	// pingTimeout bounds that check.
	pingTimeout = 5 * time.Second
	// catchUpMargin widens the catch-up window after a lost connection for
	// the clocks of the replicas that stamped finished_at.
	catchUpMargin = 5 * time.Second
	// defaultListenSetup bounds a Listen's start: its connection, its
	// LISTEN and its catch-up (Store.listenSetup). Without a bound, a
	// statement on a connection cut off without a word (a partition)
	// waits for the operating system to give it up, a quarter of an hour
	// on Linux, and the replica listens to nothing meanwhile.
	defaultListenSetup = 30 * time.Second
)

// Publish sends e to every automator listening on this database's schema
// (NOTIFY). It is delivered once the statement commits, so after the change
// it announces, which the caller made before.
//
// Concurrent calls share a statement: while a NOTIFY is on its way
// (maxNotifySenders), the events published meanwhile wait and then go
// together, each still its own notification in the format every replica
// understands, in one transaction (one round trip and one commit for all
// of them). That transaction commits without waiting for its WAL flush
// (synchronous_commit off for it alone): it writes no data, a notification
// is delivered at commit either way, and one lost in a crash is caught up
// from the tables by every Listen, whose connections the crash ends. Every
// other write keeps the server's setting. A statement that fails is sent
// again, twice at most, shortly after (notifyAttempts); Publish returns
// the last failure.
func (s *Store) Publish(ctx context.Context, e Event) error {
	data, err := json.Marshal(payload{Origin: s.origin, Kind: e.Kind, Account: e.Account, WorkID: e.WorkID, InstanceID: e.InstanceID,
		RunID: e.RunID, PollSeq: e.PollSeq, Seq: s.notify.seq.Add(1)})
	if err != nil {
		return fmt.Errorf("publishing a queue event: %w", err)
	}
	b := s.notify.add(string(data), s.sendNotifications)
	select {
	case <-b.done:
	case <-ctx.Done():
		return fmt.Errorf("publishing a queue event: %w", ctx.Err())
	}
	if b.err != nil {
		return fmt.Errorf("publishing a queue event: %w", b.err)
	}
	return nil
}

// notifier gathers the payloads of concurrent Publish calls into batches
// that up to maxNotifySenders goroutines at a time send.
type notifier struct {
	mu sync.Mutex
	// next is the batch that new payloads join; nil when none waits.
	next *notifyBatch
	// senders is the number of goroutines sending batches.
	senders int
	// seq numbers the payloads (payload.Seq).
	seq atomic.Uint64
}

type notifyBatch struct {
	payloads []string
	done     chan struct{} // closed once sent; err is set before
	err      error
}

// maxNotifySenders bounds the NOTIFY statements of one Store on their way
// at once: below it, an event goes at once, as alone; at it, events
// gather. One gathered the most per statement and left PostgreSQL the
// least work per unit in the bench (docs/performance.md); four made more,
// smaller statements.
const maxNotifySenders = 1

// add puts payload into the next batch and returns it, starting send in a
// goroutine unless maxNotifySenders are sending.
func (n *notifier) add(payload string, send func(*notifyBatch) error) *notifyBatch {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.next == nil {
		n.next = &notifyBatch{done: make(chan struct{})}
	}
	b := n.next
	b.payloads = append(b.payloads, payload)
	if n.senders < maxNotifySenders {
		n.senders++
		go n.run(send)
	}
	return b
}

// run sends batches until none waits.
func (n *notifier) run(send func(*notifyBatch) error) {
	for {
		n.mu.Lock()
		b := n.next
		n.next = nil
		if b == nil {
			n.senders--
			n.mu.Unlock()
			return
		}
		n.mu.Unlock()
		b.err = send(b)
		close(b.done)
	}
}

// notifyTimeout bounds the sending of one batch, its retries included.
const notifyTimeout = 10 * time.Second

// maxNotifyBatch bounds the notifications of one statement.
const maxNotifyBatch = 1000

// A failed NOTIFY statement is sent again: notifyAttempts in all, the
// first retry after notifyBackoff, each next one after twice the delay.
// A notification lost leaves the polls waiting on other replicas to
// wait, up to a poll window, for a unit queued here; one sent twice (its
// outcome unknown, it had been delivered) costs its listeners a wasted
// wake-up at most: handling is idempotent.
const (
	notifyAttempts = 3
	notifyBackoff  = 20 * time.Millisecond
)

// sendNotifications sends a batch of payloads: one statement, so one
// transaction, committed without waiting for its WAL flush (see Publish).
func (s *Store) sendNotifications(b *notifyBatch) error {
	ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
	defer cancel()
	for p := b.payloads; len(p) > 0; {
		chunk := p[:min(len(p), maxNotifyBatch)]
		p = p[len(chunk):]
		if err := s.notifyRetrying(ctx, chunk); err != nil {
			return err
		}
	}
	return nil
}

// notifyRetrying sends one statement of notifications, again after a
// failure (notifyAttempts), and returns the last failure.
func (s *Store) notifyRetrying(ctx context.Context, payloads []string) error {
	delay := notifyBackoff
	for attempt := 1; ; attempt++ {
		err := s.notifyOnce(ctx, payloads)
		if err == nil {
			return nil
		}
		if attempt == notifyAttempts {
			return fmt.Errorf("NOTIFY, tried %d times: %w", attempt, err)
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("NOTIFY, tried %d times: %w", attempt, err)
		}
		delay *= 2
	}
}

// notifyOnce sends one statement of notifications.
func (s *Store) notifyOnce(ctx context.Context, payloads []string) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	if s.testHookNotify != nil {
		s.testHookNotify(c.Conn().PgConn().PID())
	}
	_, err = c.Exec(ctx, `SELECT set_config('synchronous_commit', 'off', true), count(pg_notify($1, p))
FROM unnest($2::text[]) AS p`, s.channel, payloads)
	return err
}

// Listen calls fn for every event another Store publishes on this schema
// (this Store's own it skips: the publisher has applied them already) until
// ctx is done, when it returns nil, or until its connection fails, when it
// returns the error and the caller calls it again.
//
// It LISTENs on a connection of its own, outside the pool: a pooled
// connection would be handed to queries and lose the session. While no
// notification comes it pings the connection every few seconds, so a dead
// one is noticed.
//
// Notifications sent while no connection listened are lost, so a Listen
// that follows an earlier one of the same Store first replays, from the
// tables, what the gap may have hidden: an ended event, without a WorkID,
// for each instance (of an account) that had claimed a unit that ended
// since the last moment the old connection was known to work, which wakes
// its polls to look at its running units (a cancel), and a queued event
// for each account with queued units. That is one event per instance and
// per account, however many units ended or wait: a gap of hours on a busy
// database replays no more than a gap of seconds. The waiters of the
// units that ended are woken by EventResumed, which follows. A Listen
// whose catch-up fails returns its error and leaves that moment as it
// was, so the next one replays the whole gap. Handling is idempotent, so
// replaying too much costs a few wasted wake-ups, no more.
//
// Its start (connecting, LISTEN, the catch-up) is bounded
// (defaultListenSetup): a start that takes longer returns its error, and
// the caller calls it again, as after a lost connection.
//
// That replay goes by the units' finished_at, stamped when an end is made,
// not when it commits: an end that took longer than catchUpMargin to commit
// may be missing from it. So after the replay, before any notification,
// every Listen calls fn with EventResumed, for the listener to read again
// what it waits for.
func (s *Store) Listen(ctx context.Context, fn func(Event)) error {
	setup, cancelSetup := context.WithTimeout(ctx, s.listenSetup)
	defer cancelSetup()
	conn, err := pgx.ConnectConfig(setup, s.listenConfig)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("listening for queue events on %s: connecting: %w", s.redacted, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	if _, err := conn.Exec(setup, `LISTEN `+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("listening for queue events: LISTEN %s: %w", s.channel, err)
	}
	// This connection listens from now on; it becomes the moment to catch
	// up from next time only once the catch-up of the gap before it has
	// succeeded, so a Listen whose catch-up fails leaves that gap to the next.
	listening := time.Now()
	if since := s.lastHeard(); !since.IsZero() {
		if err := s.catchUp(setup, since.Add(-catchUpMargin), fn); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("listening for queue events: catching up since %s: %w", since.Format(time.RFC3339), err)
		}
	}
	cancelSetup()
	s.markHeard(listening)
	fn(Event{Kind: EventResumed})
	if s.testHookListening != nil {
		s.testHookListening()
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, listenPing)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, context.DeadlineExceeded):
			// Quiet for a while: make sure the connection still works.
			pctx, cancel := context.WithTimeout(ctx, pingTimeout)
			err = conn.Ping(pctx)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("listening for queue events: the connection stopped answering: %w", err)
			}
			s.markHeard(time.Now())
			continue
		case err != nil:
			return fmt.Errorf("listening for queue events: %w", err)
		}
		s.markHeard(time.Now())
		var p payload
		if err := json.Unmarshal([]byte(n.Payload), &p); err != nil || p.Kind == "" {
			continue // not ours to understand; an event is only ever a hint
		}
		if p.Origin == s.origin {
			continue
		}
		fn(Event{Kind: p.Kind, Account: p.Account, WorkID: p.WorkID, InstanceID: p.InstanceID, RunID: p.RunID, PollSeq: p.PollSeq})
	}
}

// lastHeard returns the latest moment a Listen connection was known to
// work (zero if none).
func (s *Store) lastHeard() time.Time {
	s.listenMu.Lock()
	defer s.listenMu.Unlock()
	return s.heard
}

// markHeard records that a Listen connection worked at t.
func (s *Store) markHeard(t time.Time) {
	s.listenMu.Lock()
	defer s.listenMu.Unlock()
	if t.After(s.heard) {
		s.heard = t
	}
}

// catchUp replays what notifications may have said since a moment: one
// event per claimer of units that ended since, and per account with queued
// units (Listen).
func (s *Store) catchUp(ctx context.Context, since time.Time, fn func(Event)) error {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT account, instance_id FROM work
WHERE finished_at >= $1 AND instance_id <> ''`, since)
	if err != nil {
		return err
	}
	var ended []Event
	var e Event
	if _, err := pgx.ForEachRow(rows, []any{&e.Account, &e.InstanceID}, func() error {
		e.Kind = EventWorkEnded
		ended = append(ended, e)
		return nil
	}); err != nil {
		return err
	}
	rows, err = s.pool.Query(ctx, `SELECT DISTINCT account FROM work WHERE state = 'queued'`)
	if err != nil {
		return err
	}
	accounts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, e := range ended {
		fn(e)
	}
	for _, a := range accounts {
		fn(Event{Kind: EventWorkQueued, Account: a})
	}
	return nil
}
