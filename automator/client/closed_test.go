package client_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/internal/closedport"
)

// http1 answers as an HTTP/1 server does to what it does not understand.
func http1(conn net.Conn) {
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 4096)); err != nil {
		return
	}
	_, _ = conn.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
}

// plaintextGRPC returns the address of a gRPC server serving plaintext, as
// an automator's port without TLS does.
func plaintextGRPC(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(l) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return l.Addr().String()
}

// TestAConnectionClosedOrAnsweredByOtherThanAnAutomatorIsToldAtOnce: a
// call to an address whose connections are accepted, then closed or reset
// with nothing sent (a load balancer or a relay with no backend to send
// them to), or answered by something that is not an automator (an HTTP/1
// server, a plaintext port given as https; a TLS one given as http
// closes them unanswered), tells
// OnUnreachable once, not hung, with the address and an error saying what
// happened, its Kind saying which it is, and goes on trying until
// RetryFor (the test ends it once told). Before, a connection closed
// was told nothing until RetryFor ended ("giving up"), nor one answered by
// something else; a reset one was told as hung, "sent nothing for 0s".
func TestAConnectionClosedOrAnsweredByOtherThanAnAutomatorIsToldAtOnce(t *testing.T) {
	t.Parallel()
	ca, err := pki.NewCA("test CA", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	automator := automatortest.Start(t, automatortest.Options{})
	closing := closedport.Accepting(t, func(net.Conn) {})
	resetting := closedport.Accepting(t, closedport.Reset)
	httpServer := closedport.Accepting(t, http1)
	noBackend := startRelay(t, closedport.Addr(t))
	plaintext := plaintextGRPC(t)
	const closed = "accepted the connection and closed it without answering"
	const id = "w_0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name, url string
		// says are what the error says; for a reset, either (a reset
		// that comes before the dial returns fails the dial).
		says  []string
		kind  client.UnreachableKind
		reset bool
	}{
		{"closed", "https://" + closing, []string{closed}, client.KindClosed, false},
		{"closed, plaintext", "http://" + closing, []string{closed}, client.KindClosed, false},
		{"reset", "https://" + resetting, []string{closed}, client.KindClosed, true},
		{"reset, plaintext", "http://" + resetting, []string{closed}, client.KindClosed, true},
		{"relay without a backend", noBackend.url(), []string{closed}, client.KindClosed, false},
		{"HTTP/1 server", "https://" + httpServer, []string{"not an automator", `"HTTP/1.1 400 Bad Request"`}, client.KindNotAnAutomator, false},
		{"HTTP/1 server, plaintext", "http://" + httpServer, []string{"not an automator", `"HTTP/1.1 400 Bad Request"`}, client.KindNotAnAutomator, false},
		{"plaintext port as https", "https://" + plaintext, []string{"not an automator", "plaintext", "http://"}, client.KindNotAnAutomator, false},
		// A TLS server closes a connection that does not begin with a TLS
		// handshake without a word.
		{"TLS port as http", "http://" + automator.GRPCAddr, []string{closed, "TLS", "https://"}, client.KindClosed, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// What is told is told after the first round of tries, at
			// once, and ends the call, which would go on trying until
			// RetryFor.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var told unreachables
			c, err := client.New(client.Config{Addresses: []string{tc.url}, APIKey: "oak_x", CAPEM: ca.CertPEM, ServerName: "127.0.0.1", RetryFor: 3 * time.Second,
				OnUnreachable: told.tellAndEnd(cancel)})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Get(ctx, id); err == nil {
				t.Fatal("Get succeeded")
			}
			u := told.once(t, " before the call ended")
			if u.Hung || u.Address != tc.url || u.Err == nil || u.Doing != "getting work "+id {
				t.Fatalf("OnUnreachable told %+v; want not hung, the address %s, an error, doing %q", u, tc.url, "getting work "+id)
			}
			if tc.reset && strings.Contains(u.Err.Error(), "connection reset by peer") {
				if u.Kind != client.KindNotConnected {
					t.Errorf("OnUnreachable told the dial's error %q as %v; want %v", u.Err, u.Kind, client.KindNotConnected)
				}
				return
			}
			if u.Kind != tc.kind {
				t.Errorf("OnUnreachable told %q as %v; want %v", u.Err, u.Kind, tc.kind)
			}
			for _, want := range tc.says {
				if !strings.Contains(u.Err.Error(), want) {
					t.Errorf("OnUnreachable told the error %q; want it to say %q", u.Err, want)
				}
			}
		})
	}
}

// TestAConnectionClosedUnansweredWhereAnAutomatorAnsweredSaysSo: on an
// address where an automator answered before, connections closed
// unanswered are most likely its own (stopping, or a replica cut off from
// its database closing every connection it has), not a load balancer
// without a backend, as a review saw them told.
func TestAConnectionClosedUnansweredWhereAnAutomatorAnsweredSaysSo(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	r := startRelay(t, a.GRPCAddr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var told unreachables
	c, err := client.New(client.Config{Addresses: []string{r.url()}, APIKey: a.APIKey, CAPEM: a.CAPEM, ServerName: "127.0.0.1", RetryFor: 3 * time.Second,
		OnUnreachable: told.tellAndEnd(cancel)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const id = "w_0123456789abcdef0123456789abcdef"
	if _, err := c.Get(ctx, id); status.Code(err) != codes.NotFound {
		t.Fatalf("Get of an unknown unit through the relay: %v; want NotFound, from the automator", err)
	}
	// From now on the relay accepts connections and closes them.
	r.retarget(closedport.Addr(t))
	r.cut()
	if _, err := c.Get(ctx, id); err == nil {
		t.Fatal("Get succeeded")
	}
	u := told.once(t, " before the call ended")
	if u.Kind != client.KindClosed || u.Err == nil || !strings.Contains(u.Err.Error(), "though an automator answered there before") {
		t.Errorf("OnUnreachable told %q as %v; want %v, saying an automator answered there before", u.Err, u.Kind, client.KindClosed)
	}
}

// TestAGiveUpSaysWhatWentWrongAtTheLastAddress: a call that gives up
// (RetryFor over) on an address whose connections were closed unanswered
// says what OnUnreachable would have been told of it, in the error: an
// http:// URL of an automator serving TLS gave only "no automator answered;
// giving up" and gRPC's "error reading server preface: EOF" (a review).
func TestAGiveUpSaysWhatWentWrongAtTheLastAddress(t *testing.T) {
	t.Parallel()
	automator := automatortest.Start(t, automatortest.Options{})
	url := "http://" + automator.GRPCAddr
	c, err := client.New(client.Config{Addresses: []string{url}, APIKey: "oak_x", RetryFor: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Get(t.Context(), "w_0123456789abcdef0123456789abcdef")
	for _, want := range []string{"giving up) at " + url + ": it accepted the connection and closed it without answering", "TLS", "https://"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Get of an http:// URL of a TLS automator, given up: %v; want it to say %q", err, want)
		}
	}
}
