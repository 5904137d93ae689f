package agent_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/logtest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/agent"
)

// refusalClient is the real client of a real automator that closes
// refused when a poll for units is refused as unauthenticated. With
// cutOnce set, the first poll for units made after it is set fails as
// unreachable without reaching the automator (its answer counts as lost),
// and the polls after it wait for release before they are sent.
type refusalClient struct {
	automatorv1.ProxyServiceClient
	refused     chan struct{}
	refusedOnce sync.Once

	mu      sync.Mutex
	cutOnce bool
	cut     chan struct{} // closed when the poll was cut
	release chan struct{}
}

func (c *refusalClient) Poll(ctx context.Context, in *automatorv1.PollRequest, opts ...grpc.CallOption) (*automatorv1.PollResponse, error) {
	c.mu.Lock()
	cutNow, release := c.cutOnce && in.GetMaxUnits() > 0, c.release
	if cutNow {
		c.cutOnce = false
		close(c.cut)
	}
	c.mu.Unlock()
	if cutNow {
		return nil, status.Error(codes.Unavailable, "connection cut by the test")
	}
	if release != nil {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	resp, err := c.ProxyServiceClient.Poll(ctx, in, opts...)
	if status.Code(err) == codes.Unauthenticated && in.GetMaxUnits() > 0 {
		c.refusedOnce.Do(func() { close(c.refused) })
	}
	return resp, err
}

// deleteAccount deletes the automator's account as `automator account
// delete` does: through its own credential cache, returning once the
// automator's cached copy of the token has expired.
func deleteAccount(t *testing.T, a *automatortest.Automator) {
	t.Helper()
	if _, err := store.CachedCredentials(a.Store, store.CredentialTTL).AccountDelete(context.Background(),
		store.AccountDeleteParams{Name: a.Account, Reason: "account " + a.Account + " was deleted", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

// stopLines returns the lines of log that speak of the stop's lost polls.
func stopLines(log string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "stopped without telling the automator") || strings.Contains(l, "time out at their deadline") {
			out = append(out, l)
		}
	}
	return out
}

// TestAProxyOfADeletedAccountDoesNotSayItsRefusedPollsLostUnits: the polls
// of a proxy whose account was deleted are refused as unauthenticated, and
// a refused poll claims nothing: the automator refuses it before it claims
// (and fails what it had handed it). The proxy counted such a poll's
// answer as lost, and, stopped, warned that the units claimed for it "time
// out at their deadline": there were none, and the deletion had cancelled
// every unit the account had claimed. It says nothing of lost polls now.
func TestAProxyOfADeletedAccountDoesNotSayItsRefusedPollsLostUnits(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{PollWindow: 30 * time.Second})
	c := &refusalClient{ProxyServiceClient: automatorv1.NewProxyServiceClient(a.ProxyConn(t)), refused: make(chan struct{})}
	var logged logtest.Buffer
	ag := agent.New(agent.Options{
		Client: c, Keys: crypto.Keys{a.Key}, InstanceID: "deleted", ScriptsDir: t.TempDir(),
		MaxConcurrency: 1, PollWait: 30 * time.Second, GracePeriod: 5 * time.Second,
		// One refused poll, then the stop (during its backoff).
		BackoffMin: time.Minute, BackoffMax: time.Minute,
		Logger: slog.New(slog.NewTextHandler(&logged, nil)),
	})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan struct{})
	go func() { ag.Run(ctx); close(done) }()
	automatortest.WaitFor(t, 10*time.Second, "the proxy to poll", func() bool { return !ag.LastPoll().IsZero() })

	deleteAccount(t, a)
	<-c.refused
	stop()
	<-done
	if lines := stopLines(logged.String()); len(lines) > 0 {
		t.Errorf("a proxy of a deleted account, whose polls were refused, stopped saying it lost units:\n%s", strings.Join(lines, "\n"))
	}
}

// TestAProxyRefusedAfterALostPollSaysTheDeletionMayHaveCancelledItsUnits:
// a poll whose answer was lost (the connection cut) may have claimed units
// for the proxy; when the stop's report of it is then refused as
// unauthenticated, the proxy cannot tell a deleted account (the deletion
// cancelled those units) from a token withdrawn by a rotation (they time
// out at their deadline): the automator answers both alike, having
// destroyed a deleted account's token. The stop's warning says both, not
// that they time out.
func TestAProxyRefusedAfterALostPollSaysTheDeletionMayHaveCancelledItsUnits(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{PollWindow: time.Second})
	c := &refusalClient{ProxyServiceClient: automatorv1.NewProxyServiceClient(a.ProxyConn(t)), refused: make(chan struct{}),
		cut: make(chan struct{})}
	var logged logtest.Buffer
	ag := agent.New(agent.Options{
		Client: c, Keys: crypto.Keys{a.Key}, InstanceID: "cut", ScriptsDir: t.TempDir(),
		MaxConcurrency: 1, PollWait: time.Second, GracePeriod: 5 * time.Second,
		BackoffMin: 50 * time.Millisecond, BackoffMax: time.Second,
		Logger: slog.New(slog.NewTextHandler(&logged, nil)),
	})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan struct{})
	go func() { ag.Run(ctx); close(done) }()
	automatortest.WaitFor(t, 10*time.Second, "the proxy to poll", func() bool { return !ag.LastPoll().IsZero() })

	release := make(chan struct{})
	c.mu.Lock()
	c.cutOnce, c.release = true, release
	c.mu.Unlock()
	<-c.cut
	deleteAccount(t, a)
	close(release)
	<-c.refused
	stop()
	<-done
	lines := stopLines(logged.String())
	if len(lines) != 1 || !strings.Contains(lines[0], "unless its account was deleted, which cancelled them") || !strings.Contains(lines[0], "code=Unauthenticated") {
		t.Errorf("the stop's warning of a lost poll, its report refused as unauthenticated: %q; want one line saying the units time out at their deadline unless the account was deleted, which cancelled them", lines)
	}
}
