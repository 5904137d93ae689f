//go:build unix

package closedport_test

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/closedport"
)

// TestAddrRefusesAndCannotBeTaken: a dial to the address is refused, and
// no listener can take the port while the test runs.
func TestAddrRefusesAndCannotBeTaken(t *testing.T) {
	addr := closedport.Addr(t)
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err == nil {
		c.Close()
		t.Fatalf("a dial to %s was accepted", addr)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("a dial to %s: %v; want connection refused", addr, err)
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Errorf("listening on %s succeeded while it is held", addr)
	}
}
