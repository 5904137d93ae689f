//go:build linux

package chaos

import (
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
)

// TestAReservedPortRefusesConnectionsAndIsFreedForTheServer: while the
// harness holds a stopped PostgreSQL's port (reservePort), a client that
// dials it is refused, as by a stopped server, not left hanging; once
// released, a server listens on it again.
func TestAReservedPortRefusesConnectionsAndIsFreedForTheServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()

	release := reservePort(port)
	c, err := net.Dial("tcp", "127.0.0.1:"+port)
	if err == nil {
		c.Close()
		t.Fatal("a dial to the reserved port was accepted")
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("a dial to the reserved port: %v; want connection refused", err)
	}
	release()
	ln, err = net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatalf("listening on the released port: %v", err)
	}
	ln.Close()
}
