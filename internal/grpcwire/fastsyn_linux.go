package grpcwire

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// synEvery and synsFor: a SYN every second, for 20 s (FastSYNDial).
const (
	synEveryMS = 1000
	synCount   = 20
)

// fastSYN returns the Control of a dialer whose socket's retransmission
// timeout is capped at synEveryMS while it connects, and the function that
// restores the cap the socket had once it has. A kernel without the option
// (before 6.11) refuses it: the socket then connects as any does.
func fastSYN() (control func(network, address string, c syscall.RawConn) error, restore func(net.Conn)) {
	was := -1 // the socket's cap before, in ms; -1: not changed
	control = func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			old, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_RTO_MAX_MS)
			if err != nil || unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_RTO_MAX_MS, synEveryMS) != nil {
				return
			}
			was = old
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_SYNCNT, synCount)
		})
	}
	restore = func(conn net.Conn) {
		tc, ok := conn.(*net.TCPConn)
		if was < 0 || !ok {
			return
		}
		if raw, err := tc.SyscallConn(); err == nil {
			_ = raw.Control(func(fd uintptr) {
				_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_RTO_MAX_MS, was)
			})
		}
	}
	return control, restore
}
