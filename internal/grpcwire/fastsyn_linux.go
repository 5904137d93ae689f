package grpcwire

import (
	"net"
	"sync/atomic"
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
	// The sockets' cap before, in ms; -1: not changed. Atomic: a dial of
	// a name with addresses of both families makes two sockets at once.
	var was atomic.Int64
	was.Store(-1)
	control = func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			old, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_RTO_MAX_MS)
			if err != nil || unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_RTO_MAX_MS, synEveryMS) != nil {
				return
			}
			was.Store(int64(old))
			_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_SYNCNT, synCount)
		})
	}
	restore = func(conn net.Conn) {
		tc, ok := conn.(*net.TCPConn)
		old := was.Load()
		if old < 0 || !ok {
			return
		}
		if raw, err := tc.SyscallConn(); err == nil {
			_ = raw.Control(func(fd uintptr) {
				_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_RTO_MAX_MS, int(old))
			})
		}
	}
	return control, restore
}
