package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// keepaliveTime and keepaliveTimeout are the client's keepalive: a
// connection with a call on it that has heard nothing for keepaliveTime is
// pinged, and given up when the ping's answer has not come keepaliveTimeout
// later. A connection that dies silently during a long wait is so noticed
// within 20 s, and the wait resumes on a new one. keepaliveTime is the
// least gRPC allows, and the least time between pings an automator takes
// without a GOAWAY "too_many_pings" (its enforcement policy's MinTime,
// 10 s): a ping is sent only keepaliveTime after the last bytes came, the
// last ping's answer included, so never sooner than that after the last.
const (
	keepaliveTime    = 10 * time.Second
	keepaliveTimeout = 10 * time.Second
)

// addrWatch is what the connections to one address tell of it.
type addrWatch struct {
	// trouble is why its last connection did not reach an automator
	// that answers; nil once one answered.
	trouble atomic.Pointer[trouble]
	// heard is when anything last came from it, over any connection
	// (UnixNano): the answer to a ping, to another call.
	heard atomic.Int64
	// answered is set once an automator answered on it, over any
	// connection.
	answered atomic.Bool
	// dialing counts its dials under way: a TCP connection asked for and
	// neither made nor refused yet.
	dialing atomic.Int32
}

// setAnswered notes that an automator answered on the address: its
// trouble is past.
func (w *addrWatch) setAnswered() {
	w.answered.Store(true)
	w.trouble.Store(nil)
}

// lastHeard is when anything last came from the address (the zero time
// when nothing did).
func (w *addrWatch) lastHeard() time.Time {
	if n := w.heard.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// trouble is why the last connection to one address did not reach an
// automator that answers: it could not be made (err is the dial's error);
// it was made and closed by the other side, or answered by something
// that is not an automator, or refused by TLS, before an automator
// answered over it; or it was made and given up because nothing came
// over it in time (silent: the automator's process stopped or frozen,
// its packets dropped once the connection was made).
type trouble struct {
	kind UnreachableKind
	err  error
}

// errClosedUnanswered is the trouble of a connection the other side
// closed or reset before anything came over it: what accepted it has
// nothing to hand it to, as a load balancer or a relay without a healthy
// backend, or is another program on the port; or, over plaintext, it is
// an automator serving TLS, which closes a connection that does not begin
// with a TLS handshake without a word.
// errClosedAfterAnswering is that trouble on an address where an
// automator answered before: the automator itself closes connections it
// has just accepted as it stops, and a replica cut off from its database
// closes all of its own (an address given directly was told as a load
// balancer without a backend, a review found).
var (
	errClosedAfterAnswering      = errors.New("it accepted the connection and closed it without answering, though an automator answered there before (stopping? a replica cut off from its database? a load balancer whose backends went away?)")
	errClosedUnanswered          = errors.New("it accepted the connection and closed it without answering (is something in front of the automator, a load balancer or a relay, without a backend? another program on its port?)")
	errClosedUnansweredPlaintext = errors.New("it accepted the connection and closed it without answering (is something in front of the automator, a load balancer or a relay, without a backend? another program on its port? an automator serving TLS, to be given as https://?)")
)

// watchedConn is a connection to an automator that notes on its
// address's watch when an automator answers over it (its HTTP/2 settings
// come: the trouble is then past) and when anything comes, and, when gRPC
// gives it up (closes it): that it was given up for silence, when the
// automator never sent anything, or nothing a keepalive's time after it
// last did; that the other side closed it, when it did so before anything
// came; that what answered is not an automator, when what came is not TLS
// (or, over plaintext, HTTP/2); that TLS failed (tlsFailed), when what
// came is TLS that ended before an automator answered over it (an alert:
// a client certificate wanted, no HTTP/2; a certificate that does not
// verify). gRPC closes a connection itself for other reasons too (a
// GOAWAY drained, an idle channel), but not one silent for that long: a
// GOAWAY was heard just before, an idle connection hears the automator's
// own pings.
type watchedConn struct {
	net.Conn
	watch     *addrWatch
	opened    time.Time
	plaintext bool

	mu sync.Mutex
	// heard is when a read last returned data; zero until one does.
	heard time.Time
	// head is the start of what came, until it tells whether it is what
	// an automator sends (answered: TLS, or over plaintext HTTP/2) or
	// something else (foreign).
	head     []byte
	answered bool
	foreign  error
	// automator is set once an automator answered over the connection
	// (its HTTP/2 settings came, over TLS once decrypted).
	automator bool
	// tls is the trouble of a TLS layer that failed before an automator
	// answered (tlsFailed).
	tls *trouble
	// ended is set when a read or a write failed before the connection
	// was closed here: the automator, or something on the way, ended it
	// (a reset, EOF), which is no silence.
	ended bool
	// timedOut is set when the kernel ended the connection because what
	// was sent on it went unacknowledged (TCP_USER_TIMEOUT: ETIMEDOUT),
	// which is silence, not an end by the other side.
	timedOut bool
	closed   bool
	// noted is set when Close noted a trouble.
	noted bool
}

func watch(conn net.Conn, w *addrWatch, plaintext bool) *watchedConn {
	return &watchedConn{Conn: conn, watch: w, opened: time.Now(), plaintext: plaintext}
}

func (c *watchedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n == 0 && err == nil {
		return n, err
	}
	c.mu.Lock()
	first := false
	if n > 0 {
		c.heard = time.Now()
		c.watch.heard.Store(c.heard.UnixNano())
		if !c.answered && c.foreign == nil {
			c.head = append(c.head, b[:min(n, headLen-len(c.head))]...)
			c.answered, c.foreign = judge(c.head, c.plaintext, false)
			// Over TLS, what answers is known once it is decrypted
			// (tlsWatched).
			first = c.answered && c.plaintext
			c.automator = first
		}
	}
	c.endedBy(err)
	c.mu.Unlock()
	if first {
		c.watch.setAnswered()
	}
	return n, err
}

// automatorAnswered notes that an automator answered over the
// connection, over TLS: the address's trouble is past.
func (c *watchedConn) automatorAnswered() {
	c.mu.Lock()
	c.automator = true
	c.mu.Unlock()
	c.watch.setAnswered()
}

// tlsFailed notes err, of the TLS layer over the connection (its
// handshake's, or a read's before an automator answered), as the
// connection's trouble: TLS that ended with an alert, or a certificate
// that does not verify, is no automator answering; TLS closed by the other
// side after its handshake (a load balancer without a backend) was closed
// unanswered. Errors of this side's own making (a bound passed, a Close
// here), and a connection the raw one already tells of (silence, an end
// before TLS came, what is not TLS), are not noted.
func (c *watchedConn) tlsFailed(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err == nil, c.automator, c.tls != nil, c.noted, c.foreign != nil, c.timedOut, c.heard.IsZero(),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, net.ErrClosed):
		return
	case !remoteAlert(err) && (c.ended || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)):
		// An alert that came is what refused this side, even when a
		// write failed first: a server that closes after its alert,
		// what was written meanwhile unread, resets the connection.
		c.tls = c.closedUnanswered()
	default:
		c.tls = &trouble{kind: KindTLS, err: fmt.Errorf("TLS failed: %w", err)}
	}
	if c.closed {
		c.noted = true
		c.watch.trouble.Store(c.tls)
	}
}

// remoteAlert tells whether err is a TLS alert the other side sent
// (crypto/tls reports one as a net.OpError of Op "remote error").
func remoteAlert(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error"
}

func (c *watchedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err != nil {
		c.mu.Lock()
		c.endedBy(err)
		c.mu.Unlock()
	}
	return n, err
}

// endedBy notes that the other side ended the connection when err, a
// read's or a write's, says so: one cut short by a deadline or by this
// side's Close is no end by the other side.
func (c *watchedConn) endedBy(err error) {
	switch {
	case err == nil || c.closed || errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed):
	case errors.Is(err, syscall.ETIMEDOUT):
		c.timedOut = true
	default:
		c.ended = true
	}
}

// Close notes the trouble of a connection given up for silence, closed by
// the other side before anything came, answered by something that is not
// an automator, or refused by TLS, before gRPC fails the calls on it: a
// call that fails for it finds the trouble noted.
func (c *watchedConn) Close() error {
	c.mu.Lock()
	if !c.closed {
		if t := c.trouble(); t != nil {
			c.noted = true
			c.watch.trouble.Store(t)
		}
	}
	c.closed = true
	c.mu.Unlock()
	return c.Conn.Close()
}

// trouble is the connection's, as it is closed here; nil when there is
// none to tell.
func (c *watchedConn) trouble() *trouble {
	if !c.answered && c.foreign == nil && len(c.head) > 0 {
		c.answered, c.foreign = judge(c.head, c.plaintext, true)
	}
	switch {
	case c.foreign != nil:
		return &trouble{kind: KindNotAnAutomator, err: c.foreign}
	case c.tls != nil:
		return c.tls
	case c.timedOut && !c.ended:
		return &trouble{kind: KindSilent, err: fmt.Errorf("what was sent to it went unacknowledged for %v, and the connection ended", keepaliveTimeout)}
	case c.heard.IsZero() && c.ended:
		return c.closedUnanswered()
	case c.heard.IsZero():
		return &trouble{kind: KindSilent, err: fmt.Errorf("it accepted the connection, then sent nothing for %v", since(c.opened))}
	case !c.ended && time.Since(c.heard) >= keepaliveTime:
		return &trouble{kind: KindSilent, err: fmt.Errorf("nothing came over its connection for %v", since(c.heard))}
	}
	return nil
}

// closedUnanswered is the trouble of a connection the other side closed
// before an automator answered over it.
func (c *watchedConn) closedUnanswered() *trouble {
	switch {
	case c.watch.answered.Load():
		return &trouble{kind: KindClosed, err: errClosedAfterAnswering}
	case c.plaintext:
		return &trouble{kind: KindClosed, err: errClosedUnansweredPlaintext}
	}
	return &trouble{kind: KindClosed, err: errClosedUnanswered}
}

// tlsWatched is the TLS connection over a watchedConn (raw): what it
// decrypts tells whether an automator answers (its HTTP/2 settings) or
// something else, and a read that fails before one answered (an alert, an
// end) is raw's trouble (tlsFailed).
type tlsWatched struct {
	net.Conn
	raw *watchedConn

	mu   sync.Mutex
	head []byte
	done bool
}

func (c *tlsWatched) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	if c.done {
		c.mu.Unlock()
		return n, err
	}
	if n > 0 {
		c.head = append(c.head, b[:min(n, headLen-len(c.head))]...)
		answered, foreign := judge(c.head, true, false)
		switch {
		case answered:
			c.done = true
			c.mu.Unlock()
			c.raw.automatorAnswered()
			return n, err
		case foreign != nil:
			c.done = true
			c.raw.mu.Lock()
			c.raw.foreign = foreign
			c.raw.mu.Unlock()
		}
	}
	c.mu.Unlock()
	if err != nil {
		c.raw.tlsFailed(err)
	}
	return n, err
}

// Close closes the connection. When the other side ended it (a write
// failed: a reset) before an automator answered over it, and no read
// told why, it first reads what came before the end, within alertWait:
// TLS 1.3 ends the client's handshake before the server checks it, so a
// server that wants a client certificate sends its alert after it, then
// closes, and what the client wrote meanwhile, left unread, makes that
// close a reset. gRPC closes the connection once a write of its setup
// fails, its reader maybe not yet at the alert, which the close would
// then discard: nothing was told of the address (a clean-clone run,
// loaded, failed so).
func (c *tlsWatched) Close() error {
	c.mu.Lock()
	done := c.done
	c.mu.Unlock()
	if !done && c.raw.endedUntold() {
		_ = c.Conn.SetReadDeadline(time.Now().Add(alertWait))
		_, _ = c.Read(make([]byte, 1)) // tells tlsFailed
	}
	return c.Conn.Close()
}

// alertWait bounds the read of what came before the other side ended a
// connection (tlsWatched.Close): it is in the kernel already.
const alertWait = 100 * time.Millisecond

// endedUntold tells whether the other side ended the connection before an
// automator answered over it, with nothing yet to tell why.
func (c *watchedConn) endedUntold() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ended && !c.automator && c.tls == nil && c.foreign == nil && !c.closed
}

// headLen is how much of what comes first judge is given: enough to tell
// TLS and HTTP/2 from anything else, and to quote an HTTP/1 status line.
const headLen = 64

// judge tells from head, the start of what came over a connection,
// whether it is what an automator sends first: a TLS record (a TLS
// handshake's), or over plaintext an HTTP/2 SETTINGS frame (the server's
// preface); foreign, when not, says what it is instead. It judges once
// head has 4 bytes, or, when final (the connection closed), whatever
// came.
func judge(head []byte, plaintext, final bool) (answered bool, foreign error) {
	if len(head) < 4 && !final {
		return false, nil
	}
	tlsRecord := len(head) >= 2 && head[0] >= 20 && head[0] <= 23 && head[1] == 3
	h2Settings := len(head) >= 4 && head[3] == 4
	switch {
	case plaintext && h2Settings, !plaintext && tlsRecord:
		return true, nil
	case plaintext && tlsRecord:
		return false, errors.New("what answers there is not an automator serving plaintext but a TLS server: give https:// if it is an automator")
	case !plaintext && h2Settings:
		return false, errors.New("what answers there is not an automator serving TLS but a plaintext HTTP/2 server (an automator's plaintext port? give http://)")
	}
	line := head
	if i := bytes.IndexAny(line, "\r\n"); i >= 0 {
		line = line[:i]
	}
	if len(line) > 40 {
		line = line[:40]
	}
	if bytes.HasPrefix(line, []byte("HTTP/")) {
		return false, fmt.Errorf("what answers there is not an automator: it sent %q, an HTTP server's answer (the automator's HTTP listener, http_listen, 8080 by default, given for its gRPC one, listen, 8443 by default? another program on the port?)", line)
	}
	return false, fmt.Errorf("what answers there is not an automator: it sent %q (another program on the port?)", line)
}

// since is the time since t, to the tenth of a second (for messages).
func since(t time.Time) time.Duration {
	return time.Since(t).Round(100 * time.Millisecond)
}
