package grpcwire

import (
	"net"
	"syscall"
)

// NotSentLowat is how many bytes written to a connection between a proxy
// and the automator, and not yet sent, the kernel holds at most
// (TCP_NOTSENT_LOWAT, where the system has it: Linux, macOS), at either
// end. Past it, gRPC keeps what is left itself, where a keepalive ping, its
// answer, a poll or a small result goes ahead of the rest of a large
// message still to send. Without it the kernel takes as much as its send
// buffer grows to (up to 4 MiB on Linux), all sent before them: on a thin
// link that is seconds to minutes, and a keepalive, which gives a ping
// seconds for its answer, dropped a healthy connection in the middle of a
// large result on its way up, or of a large command on its way down (a
// review: a command of 512 KiB to a proxy behind 64 kbit/s, cut off at the
// automator's keepalive, with every unit of the same poll answer).
const NotSentLowat = 16 << 10

// LimitNotSent sets NotSentLowat on conn when it is a socket of a system
// that has the option; otherwise it does nothing. A failure changes
// nothing but the latency of what follows a large write.
func LimitNotSent(conn net.Conn) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) { setNotSentLowat(fd, NotSentLowat) })
}

// LimitNotSentListener is l with NotSentLowat set on each connection it
// accepts (LimitNotSent).
func LimitNotSentListener(l net.Listener) net.Listener { return lowatListener{l} }

type lowatListener struct{ net.Listener }

func (l lowatListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		LimitNotSent(c)
	}
	return c, err
}
