package agent_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/automatortest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/agent"
	"github.com/opsgate/opsgate/proxy/cli"
	"github.com/opsgate/opsgate/proxy/config"
)

// TestTheProxysConnectionTellsWhenAPollWasWritten: the connection the
// proxy dials (cli.Dial) tells a poll when its request was written
// (agent.SendTimes), after the connection was set up: its claims' time
// counts from then, not from before the wait for the connection.
func TestTheProxysConnectionTellsWhenAPollWasWritten(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	cfg := config.Config{AutomatorURL: a.URL(), Token: a.Token, Key: a.Key.String(), CACert: string(a.CAPEM), ScriptsDir: t.TempDir(), InstanceID: "w"}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	conn, err := cli.Dial(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, written := agent.RecordSent(t.Context())
	before := time.Now()
	if _, err := automatorv1.NewProxyServiceClient(conn).Poll(ctx, &automatorv1.PollRequest{InstanceId: "w", Wait: durationpb.New(0)}); err != nil {
		t.Fatal(err)
	}
	if at := written(before); !at.After(before) {
		t.Errorf("a poll over a new connection dialled by cli.Dial was told it was written at %v, the time before the call; want the time of its writing, after the connection was set up", at.Sub(before))
	}
}
