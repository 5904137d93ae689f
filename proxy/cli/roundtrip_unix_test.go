//go:build unix

package cli

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/internal/delayline"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"google.golang.org/grpc/credentials"
)

// TestRunConnectsOverALinkWithALongRoundTrip: `proxy run` connects, polls
// and runs a unit over a link whose round trip is 3 s. A connection's
// setup (TLS 1.3, then HTTP/2's settings) takes two round trips here, 6 s:
// with the whole setup bounded by 5 s, as it was, the proxy dialled again
// and again and never polled. Its TLS handshake alone, one round trip, is
// still bounded by 5 s, as is the answer to a keepalive ping.
func TestRunConnectsOverALinkWithALongRoundTrip(t *testing.T) {
	// Not parallel: its handshake, one 3 s round trip, has 2 s to spare
	// within its 5 s bound, which the load of the other tests could eat.
	a := automatortest.Start(t, automatortest.Options{})
	far := delayline.Start(t, a.GRPCAddr, 1500*time.Millisecond)
	st := executeThroughProxyRun(t, a, "https://"+far, t.TempDir(), "instance_id: far\n", "@ping")
	if st.GetState() != automatorv1.State_STATE_SUCCEEDED {
		t.Fatalf("@ping over a link with a 3 s round trip: %v (%s); want succeeded", st.GetState(), st.GetReason())
	}
}

// TestAHandshakeThatDoesNotFinishIsGivenUpWithinItsBound: an automator
// that accepts the connection and then answers nothing (hung, or stopped)
// is given up once the TLS handshake has had handshakeWithin, well before
// the whole setup's 20 s, and the error says so.
func TestAHandshakeThatDoesNotFinishIsGivenUpWithinItsBound(t *testing.T) {
	// Not parallel: it sets handshakeWithin, which every dial reads.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	defer func(d time.Duration) { handshakeWithin = d }(handshakeWithin)
	handshakeWithin = 200 * time.Millisecond

	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ctx, cancel := context.WithTimeout(t.Context(), Reconnect.MinConnectTimeout)
	defer cancel()
	creds := lowatCreds{credentials.NewTLS(&tls.Config{ServerName: "automator.example"})}
	_, _, err = creds.ClientHandshake(ctx, "automator.example", raw)
	if err == nil || !strings.Contains(err.Error(), "the TLS handshake did not finish within 200ms") || ctx.Err() != nil {
		t.Fatalf("handshake with an automator that answers nothing: %v (setup's context: %v); want given up after 200ms, the setup's 20 s not spent", err, ctx.Err())
	}
}
