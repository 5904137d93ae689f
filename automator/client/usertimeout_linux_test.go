package client

import (
	"context"
	"net"
	"testing"

	"golang.org/x/sys/unix"
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
	raw, err := w.Conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var ms int
	var gerr error
	if err := raw.Control(func(fd uintptr) { ms, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT) }); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if want := int(keepaliveTimeout.Milliseconds()); ms != want {
		t.Fatalf("TCP_USER_TIMEOUT of the client's connection: %d ms, want %d ms (the keepalive's timeout)", ms, want)
	}
}
