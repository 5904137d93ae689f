// Package socktest reads the options of a test's TCP connections.
//
// Only tests import it (test/deps checks that).
package socktest

import (
	"errors"
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// TCPInt is c's IPPROTO_TCP option opt (unix.TCP_*); c is a *net.TCPConn.
// It fails t when the option cannot be read.
func TCPInt(t testing.TB, c net.Conn, opt int) int {
	t.Helper()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := raw.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, opt) }); err != nil || gerr != nil {
		t.Fatalf("reading TCP option %d: %v", opt, errors.Join(err, gerr))
	}
	return v
}
