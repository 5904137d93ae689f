// Package delayline is a link with a long round trip, for tests: a
// listener that passes each connection on to a target, every byte
// delivered a fixed delay after it arrived, both ways.
//
// Only tests import it (test/deps checks that).
package delayline

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Start listens on a loopback port and passes each connection accepted
// there on to target, delay each way (a round trip of twice delay; the TCP
// handshake with the delay line itself is local). It returns the address
// to dial. When the test ends it closes every connection and returns once
// all of its goroutines have.
func Start(t testing.TB, target string, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() {
		close(done)
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			wg.Go(func() {
				<-done
				c.Close()
				s.Close()
			})
			wg.Go(func() { pass(c, s, delay, done) })
			wg.Go(func() { pass(s, c, delay, done) })
		}
	})
	return ln.Addr().String()
}

// pass copies from src to dst, each read written delay after it was read,
// in order; it closes both once src ends and what it read is written, or
// once done is closed.
func pass(src, dst net.Conn, delay time.Duration, done <-chan struct{}) {
	type chunk struct {
		due time.Time
		b   []byte
	}
	queue := make(chan chunk, 1024)
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer close(queue)
		for {
			b := make([]byte, 32<<10)
			n, err := src.Read(b)
			if n > 0 {
				select {
				case queue <- chunk{time.Now().Add(delay), b[:n]}:
				case <-done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() { <-read }()
	defer dst.Close()
	defer src.Close()
	for c := range queue {
		// The link's latency, not a wait for a signal.
		select {
		case <-time.After(time.Until(c.due)):
		case <-done:
			return
		}
		if _, err := dst.Write(c.b); err != nil {
			return
		}
	}
}
