package chaos

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// ConnectProxy is an outbound HTTP CONNECT proxy like those of customer
// networks: a client asks it to CONNECT host:port and it opens the tunnel.
// Like many such proxies it resolves names itself, from its routes (the
// clients behind it cannot resolve outside names), so a proxy instance
// configured with a name only the ConnectProxy knows can reach the
// automator through it and no other way.
//
// Kill drops it like a crashed process (listener closed, tunnels reset);
// Start brings it back on the same address.
type ConnectProxy struct {
	mu       sync.Mutex
	ln       net.Listener
	addr     string
	routes   map[string]string // host:port asked for → address dialled
	tunnels  map[net.Conn]struct{}
	connects map[string]int // successful CONNECTs by host:port
	closed   bool
	wg       sync.WaitGroup
}

// NewConnectProxy listens on a free loopback port.
func NewConnectProxy(routes map[string]string) (*ConnectProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &ConnectProxy{ln: ln, addr: ln.Addr().String(), routes: make(map[string]string), tunnels: make(map[net.Conn]struct{}), connects: make(map[string]int)}
	for k, v := range routes {
		p.routes[k] = v
	}
	p.wg.Add(1)
	go p.serve(ln)
	return p, nil
}

// Addr is the proxy's address, host:port (for HTTPS_PROXY=http://ADDR).
func (p *ConnectProxy) Addr() string { return p.addr }

// Route makes CONNECT host:port dial addr.
func (p *ConnectProxy) Route(hostPort, addr string) {
	p.mu.Lock()
	p.routes[hostPort] = addr
	p.mu.Unlock()
}

// Connects counts the tunnels opened to hostPort.
func (p *ConnectProxy) Connects(hostPort string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.connects[hostPort]
}

// Kill stops listening and resets every tunnel, as a crash would.
func (p *ConnectProxy) Kill() {
	p.mu.Lock()
	ln := p.ln
	p.ln = nil
	tunnels := make([]net.Conn, 0, len(p.tunnels))
	for c := range p.tunnels {
		tunnels = append(tunnels, c)
	}
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	for _, c := range tunnels {
		reset(c)
	}
}

// Start listens again on the same address after Kill.
func (p *ConnectProxy) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("connect proxy closed")
	}
	if p.ln != nil {
		return nil
	}
	ln, err := listenAgain(p.addr)
	if err != nil {
		return err
	}
	p.ln = ln
	p.wg.Add(1)
	go p.serve(ln)
	return nil
}

// Close kills the proxy for good and waits for its goroutines.
func (p *ConnectProxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Kill()
	p.wg.Wait()
}

func (p *ConnectProxy) serve(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			reset(c)
			continue
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

// track registers a connection, unless the proxy is down.
func (p *ConnectProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return false
	}
	p.tunnels[c] = struct{}{}
	return true
}

func (p *ConnectProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.tunnels, c)
	p.mu.Unlock()
}

func (p *ConnectProxy) handle(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	defer client.Close()
	_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(client)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	_ = client.SetReadDeadline(time.Time{})
	p.mu.Lock()
	target, ok := p.routes[req.Host]
	p.mu.Unlock()
	if req.Method != http.MethodConnect || !ok {
		p.refuse(client, "403 Forbidden", fmt.Sprintf("CONNECT to %q is not allowed", req.Host))
		return
	}
	server, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		p.refuse(client, "502 Bad Gateway", err.Error())
		return
	}
	if !p.track(server) {
		reset(server)
		return
	}
	defer p.untrack(server)
	defer server.Close()
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	p.mu.Lock()
	p.connects[req.Host]++
	p.mu.Unlock()
	// Bytes the client sent right after its request are the tunnel's.
	if n := br.Buffered(); n > 0 {
		head, _ := br.Peek(n)
		if _, err := server.Write(head); err != nil {
			return
		}
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(server, client); reset(server); done <- struct{}{} }()
	go func() { _, _ = io.Copy(client, server); reset(client); done <- struct{}{} }()
	<-done
	<-done
}

func (p *ConnectProxy) refuse(c net.Conn, status, reason string) {
	fmt.Fprintf(c, "HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", status, len(reason), reason)
}
