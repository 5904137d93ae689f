package client_test

import (
	"context"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/internal/waittest"
)

// refusingUntilUp is a client of a whose connections are refused until up
// is set, telling each refusal on refused (when it has room), with gRPC's
// wait between connection attempts and the call's pause between its rounds
// of tries set to reconnect and pause.
func refusingUntilUp(t *testing.T, a *automatortest.Automator, up *atomic.Bool, refused chan<- struct{}, reconnect, pause time.Duration) *client.Client {
	t.Helper()
	cfg := client.Config{Addresses: []string{a.URL()}, APIKey: a.APIKey, CAPEM: a.CAPEM, ServerName: "127.0.0.1", RetryFor: time.Minute,
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			if !up.Load() {
				select {
				case refused <- struct{}{}:
				default:
				}
				return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
			}
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}}
	client.SetReconnectWait(&cfg, reconnect)
	client.SetRetryPause(&cfg, pause)
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// getUnknown gets an unknown unit from c in a goroutine, and returns the
// channel its error comes on.
func getUnknown(t *testing.T, c *client.Client) <-chan error {
	ctx, cancel := context.WithTimeout(t.Context(), 2*waittest.Bound)
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() {
		_, err := c.Get(ctx, "w_0123456789abcdef0123456789abcdef")
		done <- err
	}()
	return done
}

// TestACallRetriedAfterRefusalsDialsAtItsOwnPace: a call whose automator
// refused its connections dials it anew at each of its own rounds of
// tries (at most 2 s apart), not when gRPC's wait between connection
// attempts ends (up to 3.6 s in production; an hour here, so that only the
// call's own pace can connect), and a pause between its rounds ends once
// a connection is set up (the pause an hour here, gRPC's wait 10 ms), so
// an automator back from a restart is used within moments (a soak: exec
// was answered up to 7.9 s after the automator served again).
func TestACallRetriedAfterRefusalsDialsAtItsOwnPace(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	for _, tc := range []struct {
		name             string
		reconnect, pause time.Duration
	}{
		{"dialled at each round", time.Hour, 10 * time.Millisecond},
		{"a pause ends once connected", 10 * time.Millisecond, time.Hour},
	} {
		var up atomic.Bool
		refused := make(chan struct{}, 1)
		done := getUnknown(t, refusingUntilUp(t, a, &up, refused, tc.reconnect, tc.pause))
		// Refused twice: once as the call began, once more (at the
		// call's next round, or at gRPC's next attempt in the pause).
		waittest.Recv(t, refused, tc.name+": the first connection to be refused")
		waittest.Recv(t, refused, tc.name+": a connection refused again")
		up.Store(true)
		if err := waittest.Recv(t, done, tc.name+": the call to be answered once the automator accepts connections"); status.Code(err) != codes.NotFound {
			t.Errorf("%s: Get of an unknown unit once the automator is back: %v, want NotFound", tc.name, err)
		}
	}
}
