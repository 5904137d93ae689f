package grpcwire

import (
	"context"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
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

// TestRedialConnectsSoonAfterSilenceEnds: through a link that drops every
// SYN for 7.8 s, a connection attempt sends its SYN again 1 s apart five
// times (Linux 6.7 and later, tcp_syn_linear_timeouts; older kernels and
// Windows back off from the start), then 2, 4, 8 s apart: a plain dial
// begun at 0 sends SYNs at about 0, 1, 2, 3, 4, 5, 7 and 11 s (0, 1, 3, 7
// and 15 s on older kernels). Redial, begun at 0.2 s, would send its own
// 0.2 s after each of those with one attempt, and connect after the plain
// dial; with a new attempt each second it sends one at 8.2 s, within a
// second of the link's return, and connects first.
func TestRedialConnectsSoonAfterSilenceEnds(t *testing.T) {
	t.Parallel()
	l, _ := fullListener(t)
	addr := l.Addr().String()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	type dialed struct {
		c   net.Conn
		err error
	}
	plain, redialed := make(chan dialed, 1), make(chan dialed, 1)
	begun := time.Now()
	go func() {
		c, err := tcpDialer().DialContext(ctx, "tcp", addr)
		plain <- dialed{c, err}
	}()
	go func() {
		time.Sleep(200 * time.Millisecond)
		c, err := Redial(ctx, addr)
		redialed <- dialed{c, err}
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
	r := <-redialed
	if r.err != nil {
		t.Fatalf("Redial: %v", r.err)
	}
	defer r.c.Close()
	select {
	case p := <-plain:
		t.Errorf("the plain dial begun before Redial connected first, %v after it began (%v); want Redial first", time.Since(begun), p.err)
		if p.c != nil {
			p.c.Close()
		}
	default:
		cancel()
		if p := <-plain; p.c != nil {
			p.c.Close()
		}
	}
}
