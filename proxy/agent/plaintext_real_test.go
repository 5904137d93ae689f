package agent_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/grpcwire"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/agent"
)

// TestAPlaintextURLOfAnAutomatorServingTLSIsSaidSo: an agent whose
// automator_url is http:// (plaintext, allowed on loopback) for an
// automator serving TLS, as serve does by default, finds its connections
// closed without a word. It says that the automator closed the plaintext
// connection and to give https://, once, at ERROR, rather than that the
// automator is unreachable with gRPC's "error reading server preface:
// EOF".
func TestAPlaintextURLOfAnAutomatorServingTLSIsSaidSo(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	conn, err := grpc.NewClient(a.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(grpcwire.Bearer(a.Token, false)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	log := &syncBuffer{}
	ag := agent.New(agent.Options{
		Client:     automatorv1.NewProxyServiceClient(conn),
		Automator:  "http://" + a.GRPCAddr,
		Keys:       crypto.Keys{a.Key},
		InstanceID: "plain",
		ScriptsDir: t.TempDir(),
		PollWait:   time.Second,
		BackoffMin: 10 * time.Millisecond,
		BackoffMax: 50 * time.Millisecond,
		Logger:     slog.New(slog.NewTextHandler(log, nil)),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = ag.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waittest.Until(t, "the line saying the automator closed the plaintext connection", func() bool {
		return strings.Contains(log.String(), "level=ERROR msg=\"the automator closed the plaintext connection without answering")
	})
	line := log.String()
	if !strings.Contains(line, "give `automator_url` as https://") || !strings.Contains(line, "automator=http://"+a.GRPCAddr) {
		t.Errorf("the line does not say to give https:// or does not name the automator:\n%s", line)
	}
	if n := strings.Count(line, "automator unreachable"); n != 0 {
		t.Errorf("%d lines say the automator is unreachable; want none: it answered, in TLS:\n%s", n, line)
	}
}
