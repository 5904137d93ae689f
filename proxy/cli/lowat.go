package cli

import (
	"context"
	"net"
	"syscall"

	"google.golang.org/grpc/credentials"

	"github.com/opsgate/opsgate/internal/grpcwire"
)

// notSentLowat is how many bytes written to the connection to the
// automator, and not yet sent, the kernel holds at most (TCP_NOTSENT_LOWAT,
// where the system has it: Linux, macOS). Past it, gRPC keeps what is left
// itself, where a keepalive ping, a poll or a small result goes ahead of
// the rest of a large result still to send. Without it the kernel takes as
// much as its send buffer grows to (up to 4 MiB on Linux), all sent before
// them: on a thin uplink that is seconds to minutes, and the keepalive,
// which gives a ping 5 s for its answer, dropped a healthy connection in
// the middle of the upload, with the poll waiting on it and the claims
// handed to that poll.
const notSentLowat = 16 << 10

// handshakeWithin is how long a connection's TLS handshake may take
// (grpcwire.HandshakeWithin; shorter in a test). It is the keepalive's
// bound for the answer to a ping too (Keepalive.Timeout), another single
// round trip.
var handshakeWithin = grpcwire.HandshakeWithin

// lowatCreds sets notSentLowat on each connection before its handshake and
// gives the handshake handshakeWithin.
type lowatCreds struct {
	credentials.TransportCredentials
}

func (c lowatCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	limitNotSent(raw)
	return grpcwire.Handshake(ctx, handshakeWithin, c.TransportCredentials, authority, raw)
}

func (c lowatCreds) Clone() credentials.TransportCredentials {
	return lowatCreds{c.TransportCredentials.Clone()}
}

// limitNotSent sets notSentLowat on conn when it is a socket of a system
// that has the option; otherwise it does nothing. A failure changes
// nothing but the latency of what follows a large write.
func limitNotSent(conn net.Conn) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) { setNotSentLowat(fd, notSentLowat) })
}
