package agent_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/agent"
)

// credRefusalClient passes polls on, and tells refused once the automator
// has refused one that asked for units with code.
type credRefusalClient struct {
	automatorv1.ProxyServiceClient
	code    codes.Code
	refused chan struct{}
	once    sync.Once
}

func (c *credRefusalClient) Poll(ctx context.Context, in *automatorv1.PollRequest, opts ...grpc.CallOption) (*automatorv1.PollResponse, error) {
	resp, err := c.ProxyServiceClient.Poll(ctx, in, opts...)
	if status.Code(err) == c.code && in.GetMaxUnits() > 0 {
		c.once.Do(func() { close(c.refused) })
	}
	return resp, err
}

// TestAPollRefusedForItsCredentialsIsNotKeptAsLost: a poll the automator
// refuses for the proxy's token (Unauthenticated) or for the keys it holds
// (FailedPrecondition: another account's key under the id, or none usable
// now) is refused before anything is claimed for it. A proxy stopped after
// such refusals keeps no record of lost polls in its spool, which would
// say at its stop that units claimed for them fail at its next start, and
// make `proxy uninstall` leave the spool behind.
func TestAPollRefusedForItsCredentialsIsNotKeptAsLost(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{PollWindow: 30 * time.Second})
	otherKey, err := crypto.NewKey(a.Key.ID) // the account's key id, another secret
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		conn *grpc.ClientConn
		keys crypto.Keys
		code codes.Code
	}{
		{"a wrong token", a.SecretConn(t, "opt_wrong"), crypto.Keys{a.Key}, codes.Unauthenticated},
		{"a key that is not the account's", a.ProxyConn(t), crypto.Keys{otherKey}, codes.FailedPrecondition},
	} {
		t.Run(c.name, func(t *testing.T) {
			client := &credRefusalClient{ProxyServiceClient: automatorv1.NewProxyServiceClient(c.conn), code: c.code, refused: make(chan struct{})}
			spool := filepath.Join(t.TempDir(), agent.SpoolDirName)
			ctx, stop := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				agent.New(agent.Options{
					Client: client, Keys: c.keys, InstanceID: "refused", ScriptsDir: t.TempDir(),
					// One refused poll, then a wait the stop ends.
					MaxConcurrency: 1, PollWait: 30 * time.Second, GracePeriod: 5 * time.Second,
					BackoffMin: time.Hour, BackoffMax: time.Hour, SpoolDir: spool,
					Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				}).Run(ctx)
				close(done)
			}()
			waittest.Recv(t, client.refused, "a poll refused with "+c.code.String())
			stop()
			waittest.Recv(t, done, "the agent to stop")
			if _, err := os.Stat(filepath.Join(spool, agent.LostPollsName)); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("after polls refused with %v, the spool holds a record of lost polls (%v); want none: nothing was claimed for them", c.code, err)
			}
		})
	}
}
