// Package racedial dials a TCP address whose host name resolves to several
// addresses by racing them, as RFC 8305 (happy eyeballs) does: the first
// is dialed, and each next one is dialed beside those under way once the
// last began Stagger ago, or at once when one fails; the first connection
// made wins, and the others are closed. Go's own dialer tries the
// addresses of one family one after another, each given its share of the
// time left, so that a name whose first address is black-holed (a replica
// behind a round-robin name powered off) took a caller about 10 s at each
// connection, where gRPC's own resolver, which the proxy uses, races them.
package racedial

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"
)

// Stagger is how long one attempt has before the next address's begins
// beside it: RFC 8305's connection attempt delay, and gRPC's.
const Stagger = 250 * time.Millisecond

// Dialer dials TCP addresses, racing the addresses a host name resolves
// to. Its zero value uses net.DefaultResolver.
type Dialer struct {
	// Resolver looks host names up; nil is net.DefaultResolver.
	Resolver *net.Resolver
}

// DialContext connects to address, HOST:PORT. A HOST that is an IP
// address is dialed as it is; a name is looked up, and its addresses, in
// the order the lookup gives them (RFC 6724's), raced.
func (d Dialer) DialContext(ctx context.Context, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: err}
	}
	var nd net.Dialer
	if _, err := netip.ParseAddr(host); err == nil {
		return nd.DialContext(ctx, "tcp", address)
	}
	r := d.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	ips, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: err}
	}
	addrs := make([]string, len(ips))
	for i, ip := range ips {
		addrs[i] = net.JoinHostPort(ip.Unmap().String(), port)
	}
	return Race(ctx, addrs, Stagger, nd.DialContext)
}

// Race dials addrs with dial, one after another stagger apart, or the
// next at once when one fails, and returns the first connection made,
// closing any other made later. When none is, it returns the error of the
// first address, as Go's dialer does.
func Race(ctx context.Context, addrs []string, stagger time.Duration, dial func(ctx context.Context, network, address string) (net.Conn, error)) (net.Conn, error) {
	switch len(addrs) {
	case 0:
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("no address to dial")}
	case 1:
		return dial(ctx, "tcp", addrs[0])
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		i    int
		conn net.Conn
		err  error
	}
	// Buffered for every attempt: none waits to hand over its result.
	results := make(chan result, len(addrs))
	errs := make([]error, len(addrs))
	next, pending := 0, 0
	start := func() {
		i := next
		next++
		pending++
		go func() {
			conn, err := dial(ctx, "tcp", addrs[i])
			results <- result{i, conn, err}
		}()
	}
	start()
	timer := time.NewTimer(stagger)
	defer timer.Stop()
	for {
		var staggered <-chan time.Time
		if next < len(addrs) {
			staggered = timer.C
		}
		select {
		case r := <-results:
			pending--
			if r.err == nil {
				cancel()
				go func(n int) {
					for range n {
						if r := <-results; r.conn != nil {
							r.conn.Close()
						}
					}
				}(pending)
				return r.conn, nil
			}
			errs[r.i] = r.err
			switch {
			case next < len(addrs):
				start()
				timer.Reset(stagger)
			case pending == 0:
				for _, err := range errs {
					if err != nil {
						return nil, err
					}
				}
			}
		case <-staggered:
			start()
			timer.Reset(stagger)
		}
	}
}
