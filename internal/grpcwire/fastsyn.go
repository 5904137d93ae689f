package grpcwire

import (
	"context"
	"net"
)

// FastSYNDial is a gRPC dialer (grpc.WithContextDialer) of TCP
// connections whose connection attempt sends its SYN again every second
// while it goes unanswered, where the kernel backs off to 2, 4, 8 s and
// more between them (Linux 6.7 and later send the first five 1 s apart,
// older kernels double from the start). A link that dropped packets
// silently (a partition, a firewall's blackhole) and is back was used at
// the attempt's next SYN, up to 8 s later: a result posted just before its
// unit's deadline was lost (measured in network namespaces). With a SYN
// every second, the proxy connects within about a second of the link's
// return, on the one socket (one source port, one entry in a NAT's or
// firewall's table), sending no more than a SYN a second.
//
// The SYNs' spacing is the socket's retransmission timeout, capped at 1 s
// while it connects (TCP_RTO_MAX_MS, Linux 6.11 and later) and restored
// once connected, so that data on a slow link is not sent again early;
// the SYNs go on for 20 s (TCP_SYNCNT), gRPC's bound on a connection's
// setup. Elsewhere, and on older kernels, it dials as gRPC's own dialer
// does. It does not go through a web proxy: use it only where gRPC would
// dial directly (no HTTPS_PROXY), whose dialer it replaces, keepalives as
// gRPC's (the system's).
func FastSYNDial(ctx context.Context, addr string) (net.Conn, error) {
	d := tcpDialer()
	var restore func(net.Conn)
	d.Control, restore = fastSYN()
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	restore(c)
	return c, nil
}

func tcpDialer() *net.Dialer {
	// TCP keepalive on, with the system's times, as gRPC's dialer sets
	// it (its internal NetDialerWithTCPKeepalive).
	return &net.Dialer{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: -1, Interval: -1, Count: -1}}
}
