package cli

import (
	"context"
	"net"
	"testing"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/opsgate/opsgate/internal/grpcwire"
	"github.com/opsgate/opsgate/internal/socktest"
)

// TestTheConnectionToTheAutomatorHoldsLittleUnsent: the proxy's connection
// to the automator lets the kernel hold at most grpcwire.NotSentLowat bytes not yet
// sent, so a keepalive ping or a poll is not queued behind megabytes of a
// large result on a thin uplink (and the connection is not dropped as dead
// while the ping waits).
func TestTheConnectionToTheAutomatorHoldsLittleUnsent(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			_, _ = c.Read(make([]byte, 1))
		}
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	before := notSent(t, raw)
	conn, _, err := lowatCreds{insecure.NewCredentials()}.ClientHandshake(context.Background(), "automator", raw)
	if err != nil {
		t.Fatal(err)
	}
	if got := notSent(t, conn); got != grpcwire.NotSentLowat {
		t.Fatalf("TCP_NOTSENT_LOWAT %d after the handshake (%d before), want %d", got, before, grpcwire.NotSentLowat)
	}
}

func notSent(t *testing.T, c net.Conn) int {
	t.Helper()
	return socktest.TCPInt(t, c, unix.TCP_NOTSENT_LOWAT)
}
