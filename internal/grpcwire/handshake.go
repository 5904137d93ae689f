package grpcwire

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc/credentials"
)

// SetupWithin is how long a client's connection to the automator may take
// to set up (TCP, a web proxy's tunnel, TLS 1.3 and HTTP/2's settings:
// three to four round trips): gRPC's default, its MinConnectTimeout.
//
// HandshakeWithin is how long its TLS handshake, a single round trip and
// the automator's work, may take of that. An automator that accepts the
// connection and then answers nothing (hung, stopped) is given up after
// it, and a link with a round trip of up to about HandshakeWithin under
// load still connects. With the whole setup in 5 s, one of more than about
// 1.6 s never did.
const (
	SetupWithin     = 20 * time.Second
	HandshakeWithin = 5 * time.Second
)

// Handshake runs creds' client handshake on raw, giving it within of ctx
// at most. Its error, when that ran out, says so.
func Handshake(ctx context.Context, within time.Duration, creds credentials.TransportCredentials, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	hctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	conn, info, err := creds.ClientHandshake(hctx, authority, raw)
	if err != nil && ctx.Err() == nil && hctx.Err() != nil {
		err = fmt.Errorf("the TLS handshake did not finish within %s: %w", within, err)
	}
	return conn, info, err
}
