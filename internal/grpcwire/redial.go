package grpcwire

import (
	"context"
	"net"
	"time"
)

// RedialEvery and RedialMost are how Redial paces its connection attempts:
// a new one every second while none has been answered, at most eight
// waiting at once. Eight seconds cover the round trip of the slowest link
// a connection is set up over (grpcwire.HandshakeWithin, 5 s) with room.
const (
	RedialEvery = time.Second
	RedialMost  = 8
)

// Redial is a gRPC dialer (grpc.WithContextDialer) of TCP connections that,
// while its connection attempt goes unanswered, starts another every
// RedialEvery, up to RedialMost waiting at once (the oldest given up for a
// new one), and takes the first that connects. A link that drops packets
// silently (a partition, a firewall's blackhole) leaves a connection
// attempt waiting for the kernel to send its SYN again, 1, 2, 4, 8, 16 s
// apart: once the link is back, the attempt waited for that next SYN, up
// to 8 s and more, where a result posted just before its unit's deadline
// was lost (measured in network namespaces). With an attempt begun every
// second, a SYN goes out within about a second of the link's return.
//
// An attempt that fails (refused, unreachable) ends the dial at once with
// its error, as gRPC's own dialer does: only silence is answered with
// another attempt. Redial does not go through a web proxy: use it only
// where gRPC would dial directly (no HTTPS_PROXY), whose dialer it
// replaces, keepalives as gRPC's (the system's).
func Redial(ctx context.Context, addr string) (net.Conn, error) {
	return redial(ctx, addr, RedialEvery, RedialMost, tcpDialer().DialContext)
}

func tcpDialer() *net.Dialer {
	// TCP keepalive on, with the system's times, as gRPC's dialer sets
	// it (its internal NetDialerWithTCPKeepalive).
	return &net.Dialer{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: -1, Interval: -1, Count: -1}}
}

// redial is Redial with its pacing and dial given.
func redial(ctx context.Context, addr string, every time.Duration, most int, dial func(context.Context, string, string) (net.Conn, error)) (net.Conn, error) {
	type outcome struct {
		conn net.Conn
		err  error
		n    int
	}
	outcomes := make(chan outcome)
	var waiting []context.CancelFunc // by attempt, nil once it ended
	pending := 0
	begin := func() {
		actx, cancel := context.WithCancel(ctx)
		n := len(waiting)
		waiting = append(waiting, cancel)
		pending++
		go func() {
			c, err := dial(actx, "tcp", addr)
			outcomes <- outcome{c, err, n}
		}()
	}
	// finish cancels the attempts still waiting and, out of the way of
	// the dial's return, closes what any of them still connects.
	finish := func() {
		for _, cancel := range waiting {
			if cancel != nil {
				cancel()
			}
		}
		go func(pending int) {
			for ; pending > 0; pending-- {
				if o := <-outcomes; o.conn != nil {
					o.conn.Close()
				}
			}
		}(pending)
	}
	begin()
	tick := time.NewTicker(every)
	defer tick.Stop()
	done := ctx.Done()
	var lastErr error
	for {
		select {
		case o := <-outcomes:
			pending--
			given := waiting[o.n] == nil // given up for a newer one
			if !given {
				waiting[o.n]()
				waiting[o.n] = nil
			}
			switch {
			case o.err == nil && !given && ctx.Err() == nil:
				finish()
				return o.conn, nil
			case o.err == nil:
				o.conn.Close()
			case given:
			case ctx.Err() == nil:
				// Refused, unreachable: said at once, as gRPC's dialer
				// does.
				finish()
				return nil, o.err
			default:
				lastErr = o.err
			}
			if ctx.Err() != nil && pending == 0 {
				if lastErr == nil {
					lastErr = ctx.Err()
				}
				return nil, lastErr
			}
		case <-tick.C:
			if ctx.Err() != nil {
				continue
			}
			live := 0
			for _, cancel := range waiting {
				if cancel != nil {
					live++
				}
			}
			if live >= most {
				for i, cancel := range waiting {
					if cancel != nil {
						cancel()
						waiting[i] = nil
						break
					}
				}
			}
			begin()
		case <-done:
			// Every attempt ends with ctx; the last to end says why.
			done = nil
			tick.Stop()
		}
	}
}
