package client

import (
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
)

// timingOutConn is a connection whose reads fail as the kernel fails them
// once TCP_USER_TIMEOUT ends a connection whose data went unacknowledged
// (ETIMEDOUT), which only dropped packets make happen on a real socket: a
// fake of that one error, over a real pipe.
type timingOutConn struct{ net.Conn }

func (timingOutConn) Read([]byte) (int, error) {
	return 0, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ETIMEDOUT)}
}

// TestAConnectionTheKernelTimedOutIsToldAsHung: a connection that the
// kernel ended because what was sent on it went unacknowledged (the
// automator's host gone, its packets dropped) was not ended by the
// automator: it is told as not answering, as the keepalive's own end of
// it is, whether the automator had answered on it before or not.
func TestAConnectionTheKernelTimedOutIsToldAsHung(t *testing.T) {
	t.Parallel()
	for _, answeredBefore := range []bool{false, true} {
		a, b := net.Pipe()
		defer b.Close()
		w := &addrWatch{}
		c := watch(timingOutConn{a}, w, true)
		if answeredBefore {
			c.mu.Lock()
			c.heard, c.answered = c.opened, true
			c.mu.Unlock()
		}
		if _, err := c.Read(make([]byte, 16)); err == nil {
			t.Fatal("read: no error")
		}
		c.Close()
		tr := w.trouble.Load()
		if tr == nil || tr.kind != KindSilent || !strings.Contains(tr.err.Error(), "acknowledged") {
			t.Errorf("answered before %v: trouble after ETIMEDOUT = %+v; want silent, saying what was sent went unacknowledged", answeredBefore, tr)
		}
	}
}
