package client

import (
	"context"
	"net"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/opsgate/opsgate/internal/socktest"
)

// TestTheClientsConnectionsKeepTheirUserTimeout: data sent on a connection
// to an automator and not acknowledged within the keepalive's timeout ends
// the connection (TCP_USER_TIMEOUT), as gRPC makes it on the connections it
// wraps nothing around; the connection watch wraps keeps it.
func TestTheClientsConnectionsKeepTheirUserTimeout(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	var d net.Dialer
	dial := watchedDialer(func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) },
		&certCheck{}, &addrWatch{}, false)
	conn, err := dial(t.Context(), lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	w, ok := conn.(*watchedConn)
	if !ok {
		t.Fatalf("the dialer returned a %T, want a *watchedConn", conn)
	}
	ms := socktest.TCPInt(t, w.Conn, unix.TCP_USER_TIMEOUT)
	if want := int(keepaliveTimeout.Milliseconds()); ms != want {
		t.Fatalf("TCP_USER_TIMEOUT of the client's connection: %d ms, want %d ms (the keepalive's timeout)", ms, want)
	}
}
