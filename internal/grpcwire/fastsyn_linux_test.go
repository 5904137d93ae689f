package grpcwire

import (
	"context"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/opsgate/opsgate/internal/socktest"
)

// fullListener listens on loopback with an accept queue of one, filled
// by a connection it does not accept: the kernel drops every SYN that
// comes meanwhile, as a link that drops packets silently does, and the
// connecting side sends its SYN again 1, 2, 4 s apart. Accepting one
// connection makes room for the next SYN to arrive, and only that one.
func fullListener(t *testing.T) (l net.Listener, filler net.Conn) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "listener")
	l, err = net.FileListener(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	filler, err = net.DialTimeout("tcp", l.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { filler.Close() })
	return l, filler
}

// TestFastSYNDialConnectsSoonAfterSilenceEnds: through a link that drops
// every SYN for 7.8 s, a connection attempt sends its SYN again 1 s apart
// five times (Linux 6.7 and later, tcp_syn_linear_timeouts; older kernels
// and Windows back off from the start), then 2, 4, 8 s apart: a plain
// dial begun at 0 sends SYNs at about 0, 1, 2, 3, 4, 5, 7 and 11 s (0, 1,
// 3, 7 and 15 s on older kernels). FastSYNDial, begun at 0.2 s, would send
// its own 0.2 s after each of those as a plain dial; sending one every
// second, it sends one at about 8.2 s, within a second of the link's
// return, and connects first. Once connected, its socket's
// retransmission timeout is capped no more.
func TestFastSYNDialConnectsSoonAfterSilenceEnds(t *testing.T) {
	t.Parallel()
	if !rtoMaxSupported(t) {
		t.Skip("this kernel has no TCP_RTO_MAX_MS (Linux 6.11 and later): FastSYNDial dials as any dial")
	}
	l, _ := fullListener(t)
	addr := l.Addr().String()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	type dialed struct {
		c   net.Conn
		err error
	}
	plain, fast := make(chan dialed, 1), make(chan dialed, 1)
	begun := time.Now()
	go func() {
		c, err := tcpDialer().DialContext(ctx, "tcp", addr)
		plain <- dialed{c, err}
	}()
	go func() {
		time.Sleep(200 * time.Millisecond)
		c, err := FastSYNDial(ctx, addr)
		fast <- dialed{c, err}
	}()
	// The link is silent for 7.8 s, then takes every connection.
	time.Sleep(7800*time.Millisecond - time.Since(begun))
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	r := <-fast
	if r.err != nil {
		t.Fatalf("FastSYNDial: %v", r.err)
	}
	defer r.c.Close()
	select {
	case p := <-plain:
		t.Errorf("the plain dial begun before FastSYNDial connected first, %v after it began (%v); want FastSYNDial first", time.Since(begun), p.err)
		if p.c != nil {
			p.c.Close()
		}
	default:
		cancel()
		if p := <-plain; p.c != nil {
			p.c.Close()
		}
	}
	if got, want := socktest.TCPInt(t, r.c, unix.TCP_RTO_MAX_MS), defaultRTOMax(t); got != want {
		t.Errorf("the connected socket's TCP_RTO_MAX_MS is %d; want it restored to %d", got, want)
	}
}

// newSocketRTOMax is a new TCP socket's TCP_RTO_MAX_MS, and the error of
// a kernel that has no such option.
func newSocketRTOMax(t *testing.T) (int, error) {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	return unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_RTO_MAX_MS)
}

func rtoMaxSupported(t *testing.T) bool {
	_, err := newSocketRTOMax(t)
	return err == nil
}

// defaultRTOMax is a new TCP socket's TCP_RTO_MAX_MS.
func defaultRTOMax(t *testing.T) int {
	v, err := newSocketRTOMax(t)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
