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
const cutOffFor = 5 * time.Second

// sendAway is what a replica does while cut off from its database.
type sendAway struct {
	since    func() time.Time // when calls began to find it out of reach (zero: they do not)
	ping     func(context.Context) error
	closeAll func() int // the gRPC connections
	log      *slog.Logger

	last time.Time // when it last closed them
}

// step closes the gRPC connections when the database has been out of
// reach for cutOffFor and the last close was at least cutOffFor ago, and
// the store's ping, given a second, fails too (the calls' outage may have
// ended without a call to end it: they were all cut). It returns how
// many it closed.
func (s *sendAway) step(ctx context.Context, now time.Time) int {
	since := s.since()
	if since.IsZero() || now.Sub(since) < cutOffFor || now.Sub(s.last) < cutOffFor {
		return 0
	}
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	err := s.ping(pctx)
	cancel()
	if err == nil || ctx.Err() != nil {
		return 0
	}
	first := s.last.Before(since)
	s.last = now
	n := s.closeAll()
	if first {
		s.log.Warn("the database has been out of reach for "+now.Sub(since).Round(time.Second).String()+": closed this replica's gRPC connections so that their proxies and callers dial again, through a load balancer to a replica that reaches it (this one's /readyz answers 503); again every "+cutOffFor.String()+" while it lasts", "connections", n)
	} else {
		s.log.Debug("the database is still out of reach: closed this replica's gRPC connections again", "connections", n)
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
