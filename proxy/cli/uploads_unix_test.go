//go:build unix

package cli

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/opsgate/opsgate/automator/automatortest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// countingForwarder passes connections on to target and counts the bytes
// each carried towards it, in the order they were accepted.
type countingForwarder struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	sent   []*atomic.Int64
}

func (f *countingForwarder) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", f.target)
		if err != nil {
			c.Close()
			continue
		}
		n := new(atomic.Int64)
		f.mu.Lock()
		f.sent = append(f.sent, n)
		f.mu.Unlock()
		go func() {
			defer s.Close()
			_, _ = io.Copy(countingWriter{s, n}, c)
		}()
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, s)
		}()
	}
}

// countingWriter counts the bytes written through it to w.
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(b []byte) (int, error) {
	k, err := c.w.Write(b)
	c.n.Add(int64(k))
	return k, err
}

func (f *countingForwarder) counts() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []int64
	for _, n := range f.sent {
		out = append(out, n.Load())
	}
	return out
}

// TestRunPostsALargeResultOverAConnectionOfItsOwn: `proxy run` posts a
// result larger than 64 KiB over a second connection, not over the one it
// polls on, which carries the polls and small results only: on a thin
// uplink, the large result would otherwise be queued ahead of that
// connection's keepalive ping, which then missed its 5 s, and the healthy
// connection was dropped and the result posted again from its start. A
// real automator, the real `proxy run` and a real script.
func TestRunPostsALargeResultOverAConnectionOfItsOwn(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fwd := &countingForwarder{ln: ln, target: a.GRPCAddr}
	go fwd.serve()
	scripts := t.TempDir()
	automatortest.WriteScript(t, scripts, "large.sh", `head -c 300000 /dev/urandom | base64`)
	st := executeThroughProxyRun(t, a, "https://"+ln.Addr().String(), scripts, "instance_id: uploads\n", "large.sh")
	if st.GetState() != automatorv1.State_STATE_SUCCEEDED || len(st.GetResult().GetStdout()) < 400000 {
		t.Fatalf("unit %v (%s), %d bytes of stdout; want succeeded with 400 kB", st.GetState(), st.GetReason(), len(st.GetResult().GetStdout()))
	}
	// The first connection is the one the proxy polls on: it dials the
	// other only to post the result.
	sent := fwd.counts()
	if len(sent) != 2 || sent[0] >= 64<<10 || sent[1] < 400000 {
		t.Fatalf("bytes sent on each connection the proxy opened: %v; want two, the polling one less than 64 KiB, the other the 400 kB result", sent)
	}
}
