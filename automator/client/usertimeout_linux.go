package client

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// setUserTimeout sets TCP_USER_TIMEOUT to d on conn, when it is a TCP
// connection: data it sent that is not acknowledged within d ends it. gRPC
// sets it to the keepalive's timeout on the connections of a client with a
// keepalive, but only on a *net.TCPConn, which watch's wrapper is not.
func setUserTimeout(conn net.Conn, d time.Duration) error {
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return nil
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d/time.Millisecond))
	}); err != nil {
		return err
	}
	return serr
}
