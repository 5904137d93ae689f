package grpcwire

import (
	"net"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/opsgate/opsgate/internal/socktest"
)

// TestEachAcceptedConnectionHoldsLittleUnsent: the automator's gRPC
// listener (LimitNotSentListener) sets NotSentLowat on each connection it
// accepts, as the proxy does on its own, so the automator's keepalive ping
// is not queued behind most of a large command on its way to a proxy
// behind a thin link (a review: the connection was dropped mid-command at
// 64 kbit/s).
func TestEachAcceptedConnectionHoldsLittleUnsent(t *testing.T) {
	t.Parallel()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := LimitNotSentListener(raw)
	defer l.Close()
	for range 2 {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if got := socktest.TCPInt(t, s, unix.TCP_NOTSENT_LOWAT); got != NotSentLowat {
			t.Fatalf("TCP_NOTSENT_LOWAT of an accepted connection: %d, want %d", got, NotSentLowat)
		}
	}
}
