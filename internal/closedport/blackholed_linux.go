package closedport

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Blackholed returns "127.0.0.1:PORT", which takes no more connections and
// refuses none: a listener with a backlog of 0 whose one place is taken,
// so that Linux drops every SYN that comes, as a host powered off behind a
// firewall does. A dial of it waits for its bound.
func Blackholed(t testing.TB) string {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*unix.SockaddrInet4).Port))
	// The one place: a connection never accepted.
	first, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { first.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var d net.Dialer
	if c, err := d.DialContext(ctx, "tcp", addr); err == nil {
		c.Close()
		t.Fatalf("%s took a second connection: this kernel does not drop SYNs to a full accept queue", addr)
	}
	return addr
}
