package closedport

import (
	"net"
	"sync"
	"testing"
)

// Accepting returns the address of a listener that does to each
// connection it accepts what serve does, then closes it: a port that
// something answers other than the service the test dials (a load
// balancer without a backend when serve does nothing, or does Reset;
// another program that answers in its own protocol). It closes as the
// test ends.
func Accepting(t testing.TB, serve func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			serve(conn)
			conn.Close()
		}
	}()
	t.Cleanup(func() { l.Close(); wg.Wait() })
	return l.Addr().String()
}

// Reset makes the closing of conn, a TCP connection, send a reset (RST)
// rather than a FIN.
func Reset(conn net.Conn) { _ = conn.(*net.TCPConn).SetLinger(0) }
