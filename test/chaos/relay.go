package chaos

import (
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// Relay is a TCP relay between one proxy instance and the automator, which
// the harness uses to do to the network what customer networks do: reset
// connections, black-hole them (a partition, or a middlebox that silently
// forgets idle connections), add latency, refuse connections, and cut a
// connection in the middle of a Poll response or of a Complete (or
// CompleteBatch).
//
// For the cuts the relay must know which RPC a byte belongs to, so it reads
// the HTTP/2 frames of cleartext gRPC (h2c): the :path of each stream from
// the client's header blocks and the gRPC messages in DATA frames. Over TLS
// (h2c false) it relays opaque bytes and the cuts are never taken.
type Relay struct {
	// targets: a connection goes to the first that accepts it, as through
	// a layer-4 load balancer whose health check is the connect; with
	// CheckHealth, to the first of those its health check finds ready.
	targets []string
	h2c     bool
	onCut   func(Cut)

	mu        sync.Mutex
	ln        net.Listener
	addr      string
	links     map[*link]struct{}
	latency   time.Duration
	partition bool
	armed     map[CutKind]bool
	accepted  int
	waiters   []acceptWaiter
	closed    bool
	wg        sync.WaitGroup
	// down marks the targets the health check has taken out (CheckHealth).
	down      map[string]bool
	stopCheck chan struct{}
}

type acceptWaiter struct {
	above int
	c     chan struct{}
}

// CutKind names where a connection is cut.
type CutKind int

// The cuts. Each is armed once and taken by the first matching frame.
const (
	// CutPollResponse cuts a Poll response that carries claims halfway
	// through its DATA frame: the automator has claimed the units, the
	// proxy never learns of them.
	CutPollResponse CutKind = iota + 1
	// CutCompleteRequest cuts a Complete or CompleteBatch request halfway
	// through its last frame: the automator never receives the results; the
	// proxy posts them again.
	CutCompleteRequest
	// CutCompleteResponse drops the answer to a Complete or CompleteBatch:
	// the automator recorded the results, the proxy does not know it and
	// posts again.
	CutCompleteResponse
	// CutWaitResponse cuts a caller's Wait response that carries the
	// unit's end halfway through: the caller must wait again by id and
	// learn the same end.
	CutWaitResponse
	// CutSubmitResponse cuts a Submit response halfway through: the unit
	// is queued, the caller never learns its id and submits again with
	// the same idempotency key, which must give it that unit, not a
	// second one.
	CutSubmitResponse
)

func (k CutKind) String() string {
	switch k {
	case CutPollResponse:
		return "cut-poll-response"
	case CutCompleteRequest:
		return "cut-complete-request"
	case CutCompleteResponse:
		return "cut-complete-response"
	case CutWaitResponse:
		return "cut-wait-response"
	case CutSubmitResponse:
		return "cut-submit-response"
	}
	return "cut-unknown"
}

// Cut reports a cut the relay made: when, and the units it concerned (the
// claims of a cut Poll response, the units of a cut Complete or
// CompleteBatch).
type Cut struct {
	Kind    CutKind
	At      time.Time
	WorkIDs []string
	// State is the state a cut Wait response carried (its unit's end).
	State string
}

// NewRelay listens on a free loopback port and relays every connection to
// target. With h2c it recognises gRPC calls (cleartext HTTP/2) so cuts can
// be armed. onCut, if set, is called when an armed cut is made.
func NewRelay(target string, h2c bool, onCut func(Cut)) (*Relay, error) {
	return NewBalancingRelay([]string{target}, h2c, onCut)
}

// NewBalancingRelay is NewRelay in front of several targets (replicas of
// the automator): each new connection goes to the first target, in the
// order given, that accepts it, so the first is the instance's home and the
// others take over while it is down.
func NewBalancingRelay(targets []string, h2c bool, onCut func(Cut)) (*Relay, error) {
	if len(targets) == 0 {
		return nil, errors.New("a relay needs a target")
	}
	r := &Relay{targets: targets, h2c: h2c, onCut: onCut, links: make(map[*link]struct{}), armed: make(map[CutKind]bool), down: map[string]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r.ln, r.addr = ln, ln.Addr().String()
	r.wg.Add(1)
	go r.serve(ln)
	return r, nil
}

// CheckHealth makes the relay check each target as a load balancer does:
// every interval it asks the target's URL in health (its /readyz), with a
// timeout of one interval; two failures in a row take the target out, one
// answer of 200 puts it back. New connections go to the first target in
// order that is in and accepts; when every target is out, to the first
// that accepts, as before. Open connections are left alone (a hung target
// keeps them until their ends give up). It stops at Close.
func (r *Relay) CheckHealth(health map[string]string, interval time.Duration) {
	r.mu.Lock()
	if r.stopCheck != nil || r.closed {
		r.mu.Unlock()
		return
	}
	r.stopCheck = make(chan struct{})
	stop := r.stopCheck
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		client := &http.Client{Timeout: interval, Transport: &http.Transport{DisableKeepAlives: true}}
		fails := map[string]int{}
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			ok := map[string]bool{}
			for _, target := range r.targets {
				url, checked := health[target]
				if !checked {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp, err := client.Get(url)
					if err == nil {
						resp.Body.Close()
					}
					mu.Lock()
					ok[target] = err == nil && resp.StatusCode == http.StatusOK
					mu.Unlock()
				}()
			}
			wg.Wait()
			r.mu.Lock()
			for target, good := range ok {
				if good {
					fails[target] = 0
					delete(r.down, target)
				} else if fails[target]++; fails[target] >= 2 {
					r.down[target] = true
				}
			}
			r.mu.Unlock()
		}
	}()
}

// IsDown reports whether the health check has taken target out.
func (r *Relay) IsDown(target string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.down[target]
}

// order is the order in which a new connection tries the targets: those
// the health check has not taken out, then (when none is left) all.
func (r *Relay) order() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var in []string
	for _, t := range r.targets {
		if !r.down[t] {
			in = append(in, t)
		}
	}
	if len(in) == 0 {
		return r.targets
	}
	return in
}

// Addr is the relay's listening address, host:port.
func (r *Relay) Addr() string { return r.addr }

// Accepted counts the connections accepted so far.
func (r *Relay) Accepted() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.accepted
}

// AcceptedAbove returns a channel closed once more than n connections have
// been accepted: a proxy has dialled again.
func (r *Relay) AcceptedAbove(n int) <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := make(chan struct{})
	if r.accepted > n {
		close(c)
		return c
	}
	r.waiters = append(r.waiters, acceptWaiter{above: n, c: c})
	return c
}

// Links counts the connections open now.
func (r *Relay) Links() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.links)
}

// DropAll resets every open connection (both ends see a reset) and returns
// how many there were.
func (r *Relay) DropAll() int {
	ls := r.snapshot()
	for _, l := range ls {
		l.close()
	}
	return len(ls)
}

// DropTo resets every open connection relayed to target and returns how
// many there were.
func (r *Relay) DropTo(target string) int {
	n := 0
	for _, l := range r.snapshot() {
		if l.target == target {
			l.close()
			n++
		}
	}
	return n
}

// StallExisting black-holes every open connection for good: what each end
// sends is dropped, nothing arrives, nothing is reset, as when a middlebox
// forgets a connection. New connections flow. It returns how many it
// stalled, and when the relay last let bytes through to the client of any
// of them (zero: never): the client's silence, which a keepalive counts,
// began then, not at the stall. Each end of a stalled connection ends when
// that end gives up on it, the other end hearing nothing of it (or both at
// Partition(false)).
func (r *Relay) StallExisting() (n int, heard time.Time) {
	ls := r.snapshot()
	for _, l := range ls {
		if h := l.stall(); h.After(heard) {
			heard = h
		}
	}
	return len(ls), heard
}

// Partition black-holes all traffic, on open and new connections alike,
// while on. Turning it off resets the connections it stalled (a middlebox
// that lost their state answers with resets), and new ones flow again.
func (r *Relay) Partition(on bool) {
	r.mu.Lock()
	r.partition = on
	r.mu.Unlock()
	for _, l := range r.snapshot() {
		if on {
			l.stall()
		} else if l.isStalled() {
			l.close()
		}
	}
}

// SetLatency delays every chunk relayed, in both directions, by d.
func (r *Relay) SetLatency(d time.Duration) {
	r.mu.Lock()
	r.latency = d
	r.mu.Unlock()
}

func (r *Relay) delay() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.latency
}

// Arm makes the next matching frame cut its connection. It needs h2c.
func (r *Relay) Arm(k CutKind) {
	r.mu.Lock()
	r.armed[k] = true
	r.mu.Unlock()
}

// Disarm withdraws an armed cut; it reports whether the cut was still
// armed (not taken).
func (r *Relay) Disarm(k CutKind) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	was := r.armed[k]
	delete(r.armed, k)
	return was
}

func (r *Relay) take(k CutKind) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.armed[k] {
		return false
	}
	delete(r.armed, k)
	return true
}

// Down stops listening (new connections are refused) and resets every open
// connection.
func (r *Relay) Down() {
	r.mu.Lock()
	ln := r.ln
	r.ln = nil
	r.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	r.DropAll()
}

// Up listens again on the same address after Down.
func (r *Relay) Up() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errors.New("relay closed")
	}
	if r.ln != nil {
		return nil
	}
	ln, err := listenAgain(r.addr)
	if err != nil {
		return err
	}
	r.ln = ln
	r.wg.Add(1)
	go r.serve(ln)
	return nil
}

// Close stops the relay and waits for its goroutines.
func (r *Relay) Close() {
	r.mu.Lock()
	r.closed = true
	if r.stopCheck != nil {
		close(r.stopCheck)
		r.stopCheck = nil
	}
	r.mu.Unlock()
	r.Down()
	r.wg.Wait()
}

func (r *Relay) snapshot() []*link {
	r.mu.Lock()
	defer r.mu.Unlock()
	ls := make([]*link, 0, len(r.links))
	for l := range r.links {
		ls = append(ls, l)
	}
	return ls
}

func (r *Relay) serve(ln net.Listener) {
	defer r.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		r.wg.Add(1)
		go r.handle(c)
	}
}

func (r *Relay) handle(client net.Conn) {
	defer r.wg.Done()
	r.mu.Lock()
	r.accepted++
	kept := r.waiters[:0]
	for _, w := range r.waiters {
		if r.accepted > w.above {
			close(w.c)
		} else {
			kept = append(kept, w)
		}
	}
	r.waiters = kept
	stalled := r.partition
	r.mu.Unlock()
	l := &link{r: r, client: client, done: make(chan struct{}), stalled: stalled}
	if !stalled {
		for _, target := range r.order() {
			server, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err == nil {
				l.server, l.target = server, target
				break
			}
		}
		if l.server == nil {
			reset(client) // what the proxy sees of an automator that is down
			return
		}
	}
	r.mu.Lock()
	if r.closed || r.ln == nil {
		r.mu.Unlock()
		l.close()
		return
	}
	r.links[l] = struct{}{}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.links, l)
		r.mu.Unlock()
	}()

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); l.pump(true) }()
	if l.server != nil {
		l.pump(false)
	}
	wg.Wait()
}

// link is one relayed connection.
type link struct {
	r              *Relay
	client, server net.Conn // server is nil for a connection made during a partition
	target         string   // the target server is connected to
	done           chan struct{}
	closeOnce      sync.Once

	mu      sync.Mutex
	stalled bool
	heard   time.Time          // when bytes were last let through to the client
	streams map[uint32]*stream // h2c: what each stream is
}

// stream is what the relay learnt of one HTTP/2 stream.
type stream struct {
	path    string
	body    []byte   // of a Complete or CompleteBatch request, until it is whole
	workIDs []string // the units whose results a Complete or CompleteBatch posts
}

// stall black-holes the link and returns when bytes were last let through
// to its client: once it returns, pass lets none through.
func (l *link) stall() (heard time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stalled = true
	return l.heard
}

// pass reports whether bytes for dst go through rather than being dropped
// (the link stalled, or made during a partition); for the client, it notes
// when. Bytes for the client are let through here, before the latency, so
// the time noted is never later than their arrival.
func (l *link) pass(dst net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stalled || dst == nil {
		return false
	}
	if dst == l.client {
		l.heard = time.Now()
	}
	return true
}

func (l *link) isStalled() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stalled
}

func (l *link) close() {
	l.closeOnce.Do(func() {
		close(l.done)
		reset(l.client)
		if l.server != nil {
			reset(l.server)
		}
		l.r.mu.Lock()
		delete(l.r.links, l)
		l.r.mu.Unlock()
	})
}

// stream returns what is known of stream id (a copy).
func (l *link) stream(id uint32) stream {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.streams[id]; s != nil {
		return *s
	}
	return stream{}
}

// update changes what is known of stream id.
func (l *link) update(id uint32, f func(*stream)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.streams == nil {
		l.streams = make(map[uint32]*stream)
	}
	s := l.streams[id]
	if s == nil {
		s = &stream{}
		l.streams[id] = s
	}
	f(s)
}

// forget drops an ended stream.
func (l *link) forget(id uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.streams, id)
}

// pump copies one direction until either end fails or the link closes.
func (l *link) pump(toServer bool) {
	src, dst := l.server, l.client
	if toServer {
		src, dst = l.client, l.server
	}
	var p *h2parser
	if l.r.h2c {
		p = newH2Parser(l, toServer)
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !l.forward(dst, p, buf[:n]) {
			l.close()
			return
		}
		if err != nil {
			if l.isStalled() {
				// A middlebox that forgot the connection passes this
				// end's close on no more than its data: the other end
				// hears nothing and gives up on its own.
				reset(src)
				return
			}
			l.close()
			return
		}
	}
}

// forward relays one chunk; false means the link must be reset.
func (l *link) forward(dst net.Conn, p *h2parser, data []byte) bool {
	if !l.pass(dst) {
		return true // black-holed: dropped
	}
	if d := l.r.delay(); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-l.done:
			t.Stop()
			return false
		}
	}
	if p == nil {
		_, err := dst.Write(data)
		return err == nil
	}
	out, cut := p.feed(data)
	if len(out) > 0 {
		if _, err := dst.Write(out); err != nil {
			return false
		}
	}
	if cut != nil {
		cut.At = time.Now()
		if l.r.onCut != nil {
			l.r.onCut(*cut)
		}
		return false
	}
	return true
}

// reset closes c with a TCP reset rather than an orderly close.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// listenAgain listens on addr, retrying briefly while the port is still
// held by a closing socket.
func listenAgain(addr string) (net.Listener, error) {
	var err error
	for range 50 {
		var ln net.Listener
		if ln, err = net.Listen("tcp", addr); err == nil {
			return ln, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, err
}
