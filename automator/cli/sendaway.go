package cli

import (
	"context"
	"log/slog"
	"time"
)

// A replica cut off from the database answers the calls that need it
// UNAVAILABLE, and at once: the proxies and callers on its connections
// keep them, and retry there, though its /readyz tells the load balancer
// in front of the replicas to send it no new connection. Their results
// waited for the link to come back, past their deadlines (measured: a
// result posted to a replica cut off for 90 s was lost, its unit timed
// out, while two other replicas served). So a replica whose database has
// been out of reach for cutOffFor closes its gRPC connections, and again
// every cutOffFor while it stays so: their proxies and callers dial again,
// through the balancer to a replica that reaches the database. A proxy or
// caller given this replica's own address dials it again and is no worse
// off: its calls were failing. The calls cut are made again, as for any
// connection lost; a poll cut whose claim the database committed without
// the replica hearing of it is reported by the proxy's next poll, and the
// unit fails unrun, as for any poll whose answer was lost.
//
// Its HTTP/JSON callers are in the same place behind a balancer that
// passes connections through: their kept-alive connections stay with this
// replica, each call answered 503. So it turns HTTP keep-alives off too,
// until calls find the database again: idle connections are closed, and
// each answer closes its own (an HTTP/2 connection once its calls are
// done), so the caller's next call dials again. HTTP's calls go to the
// gRPC server over a connection in memory, which closeAll leaves alone.
const cutOffFor = 5 * time.Second

// sendAway is what a replica does while cut off from its database.
type sendAway struct {
	since    func() time.Time // when calls began to find it out of reach (zero: they do not)
	reach    func(context.Context) error
	closeAll func() int // the gRPC connections
	// keepAlives turns the HTTP listener's keep-alives on or off
	// (http.Server.SetKeepAlivesEnabled); nil: none to turn.
	keepAlives func(on bool)
	log        *slog.Logger

	last    time.Time // when it last closed them
	reached time.Time // when the database was last reached while calls found it out of reach
	httpOff bool      // keep-alives are off
}

// step closes the gRPC connections when calls have found the database out
// of reach for cutOffFor, the last close was at least cutOffFor ago, and
// the database cannot be reached on a connection of its own, set up
// within cutOffFor. Calls that wait for one of the pool's connections, all
// busy (waiting on a lock, say), or for a slow database, find it out of
// reach too, and every replica alike: closing their connections then
// cut polls whose claims were waiting to commit, and their units failed
// unrun (a review: a table locked for 25 s failed 28 of 90). A database
// reached is not tried again for cutOffFor. It returns how many
// connections it closed. Keep-alives, off from the first close, are
// turned on again once calls find the database again.
func (s *sendAway) step(ctx context.Context, now time.Time) int {
	since := s.since()
	if since.IsZero() && s.httpOff {
		s.httpOff = false
		s.keepAlives(true)
	}
	if since.IsZero() || now.Sub(since) < cutOffFor || now.Sub(s.last) < cutOffFor || now.Sub(s.reached) < cutOffFor {
		return 0
	}
	rctx, cancel := context.WithTimeout(ctx, cutOffFor)
	begun := time.Now()
	err := s.reach(rctx)
	cancel()
	outFor := now.Sub(since) + time.Since(begun) // the try to reach it included
	if ctx.Err() != nil {
		return 0
	}
	if err == nil {
		s.reached = now
		return 0
	}
	first := s.last.Before(since)
	s.last = now
	n := s.closeAll()
	if s.keepAlives != nil && !s.httpOff {
		s.httpOff = true
		s.keepAlives(false)
	}
	if first {
		s.log.Warn("the database has been out of reach for "+outFor.Round(time.Second).String()+": closed this replica's gRPC connections so that their proxies and callers dial again, through a load balancer to a replica that reaches it (this one's /readyz answers 503), again every "+cutOffFor.String()+" while it lasts; HTTP keep-alives are off until it is back", "connections", n, "err", err)
	} else {
		s.log.Debug("the database is still out of reach: closed this replica's gRPC connections again", "connections", n, "err", err)
	}
	return n
}

// run steps every second until ctx ends.
func (s *sendAway) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.step(ctx, now)
		}
	}
}
