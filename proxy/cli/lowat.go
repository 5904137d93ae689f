package cli

import (
	"context"
	"net"

	"google.golang.org/grpc/credentials"

	"github.com/opsgate/opsgate/internal/grpcwire"
)

// handshakeWithin is how long a connection's TLS handshake may take
// (grpcwire.HandshakeWithin; shorter in a test). It is the keepalive's
// bound for the answer to a ping too (Keepalive.Timeout), another single
// round trip.
var handshakeWithin = grpcwire.HandshakeWithin

// lowatCreds sets grpcwire.NotSentLowat on each connection before its
// handshake and gives the handshake handshakeWithin.
type lowatCreds struct {
	credentials.TransportCredentials
}

func (c lowatCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	grpcwire.LimitNotSent(raw)
	return grpcwire.Handshake(ctx, handshakeWithin, c.TransportCredentials, authority, raw)
}

func (c lowatCreds) Clone() credentials.TransportCredentials {
	return lowatCreds{c.TransportCredentials.Clone()}
}
