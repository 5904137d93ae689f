//go:build linux

package chaos

import (
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"

	"github.com/opsgate/opsgate/internal/proctest"
)

// TestAReservedPortRefusesConnectionsAndIsFreedForTheServer: while the
// harness holds a stopped PostgreSQL's port (reservePort), a client that
// dials it is refused, as by a stopped server, not left hanging; once
// released, a server listens on it again.
func TestAReservedPortRefusesConnectionsAndIsFreedForTheServer(t *testing.T) {
	// Below the range of outgoing connections' ports: no connection made
	// on the machine meanwhile takes it before reservePort binds it.
	port := strconv.Itoa(proctest.FreePort(t))

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
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatalf("listening on the released port: %v", err)
	}
	ln.Close()
}
