package grpcwire

import (
	"context"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc/credentials/insecure"
)

// peerConn is one end of a pipe that says its peer is at remote.
type peerConn struct {
	net.Conn
	remote net.Addr
}

func (c peerConn) RemoteAddr() net.Addr { return c.remote }

// TestLoopbackOnlyRefusesAPlaintextPeerElsewhere: plaintext credentials
// wrapped by LoopbackOnly hand on a connection whose peer is a loopback
// address, and close one whose peer is not ("localhost" mapped elsewhere
// by /etc/hosts) before anything is sent on it, saying why. Before, a
// "localhost" URL was taken for loopback by its name alone (a review).
func TestLoopbackOnlyRefusesAPlaintextPeerElsewhere(t *testing.T) {
	t.Parallel()
	creds := LoopbackOnly(insecure.NewCredentials())
	for _, tc := range []struct {
		peer net.Addr
		ok   bool
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8443}, true},
		{&net.TCPAddr{IP: net.IPv6loopback, Port: 8443}, true},
		{&net.UnixAddr{Name: "/run/automator.sock", Net: "unix"}, true},
		{&net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 8443}, false},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 8443}, false},
	} {
		mine, theirs := net.Pipe()
		got, _, err := creds.Clone().ClientHandshake(context.Background(), "localhost:8443", peerConn{mine, tc.peer})
		if tc.ok {
			if err != nil || got == nil {
				t.Errorf("peer %v: %v; want the connection handed on", tc.peer, err)
			}
		} else if err == nil || !strings.Contains(err.Error(), "plaintext is for a loopback address only") || !strings.Contains(err.Error(), tc.peer.String()) {
			t.Errorf("peer %v: %v; want it refused, naming the address", tc.peer, err)
		} else if _, rerr := theirs.Read(make([]byte, 1)); rerr == nil {
			t.Errorf("peer %v: the refused connection was not closed", tc.peer)
		}
		mine.Close()
		theirs.Close()
	}
}
