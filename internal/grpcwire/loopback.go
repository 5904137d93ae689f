package grpcwire

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc/credentials"
)

// LoopbackOnly wraps the plaintext credentials of a client that may speak
// plaintext to a loopback automator only (an http:// URL, which its
// config checked names a loopback address or "localhost"): a connection
// whose peer is not a loopback address is closed before anything is sent
// on it, so a "localhost" that /etc/hosts maps elsewhere does not get the
// credential in clear.
func LoopbackOnly(c credentials.TransportCredentials) credentials.TransportCredentials {
	return loopbackOnly{c}
}

type loopbackOnly struct {
	credentials.TransportCredentials
}

func (l loopbackOnly) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if err := CheckLoopbackPeer(conn.RemoteAddr()); err != nil {
		conn.Close()
		return nil, nil, err
	}
	return l.TransportCredentials.ClientHandshake(ctx, authority, conn)
}

func (l loopbackOnly) Clone() credentials.TransportCredentials {
	return loopbackOnly{l.TransportCredentials.Clone()}
}

// CheckLoopbackPeer refuses an address that is not a loopback one: the
// far end of a plaintext connection, or the address a plaintext listener
// was bound to.
func CheckLoopbackPeer(addr net.Addr) error {
	switch a := addr.(type) {
	case *net.TCPAddr:
		if a.IP.IsLoopback() {
			return nil
		}
	case *net.UnixAddr:
		return nil // this host's, by nature (a client's own Dial may give one)
	}
	return fmt.Errorf("plaintext is for a loopback address only, and this connection's is %v (\"localhost\" resolved elsewhere?): nothing was sent; use https://, or 127.0.0.1", addr)
}
