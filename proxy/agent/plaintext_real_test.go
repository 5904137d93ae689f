package agent_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/grpcwire"
	"github.com/opsgate/opsgate/internal/logtest"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/agent"
)

// runLoggedAgent runs, until the test ends, an agent of a's account that
// calls the automator over conn, which dials automatorURL, and returns
// its log.
func runLoggedAgent(t *testing.T, a *automatortest.Automator, conn *grpc.ClientConn, automatorURL string) *logtest.Buffer {
	t.Helper()
	log := &logtest.Buffer{}
	ag := agent.New(agent.Options{
		Client:     automatorv1.NewProxyServiceClient(conn),
		Automator:  automatorURL,
		Keys:       crypto.Keys{a.Key},
		InstanceID: "misconfigured",
		ScriptsDir: t.TempDir(),
		PollWait:   time.Second,
		BackoffMin: 10 * time.Millisecond,
		BackoffMax: 50 * time.Millisecond,
		Logger:     slog.New(slog.NewTextHandler(log, nil)),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = ag.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return log
}

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
	log := runLoggedAgent(t, a, conn, "http://"+a.GRPCAddr)
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

// TestAnHTTPSURLOfSomethingNotSpeakingTLSIsSaidSo: an agent whose
// automator_url names a port where something answers but not in TLS
// (the automator's HTTP listener given for its gRPC one, say) says so,
// once, at ERROR, naming the likely mix-up, rather than that the automator
// is unreachable with crypto/tls's "first record does not look like a TLS
// handshake".
func TestAnHTTPSURLOfSomethingNotSpeakingTLSIsSaidSo(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	web := httptest.NewServer(http.NotFoundHandler()) // plaintext HTTP/1.1
	defer web.Close()
	addr := web.Listener.Addr().String()
	tlsCfg, err := pki.ClientTLS(a.CAPEM, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
		grpc.WithPerRPCCredentials(grpcwire.Bearer(a.Token, true)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	log := runLoggedAgent(t, a, conn, "https://"+addr)
	waittest.Until(t, "the line saying what answers does not speak TLS", func() bool {
		return strings.Contains(log.String(), "level=ERROR msg=\"what answers at automator_url does not speak TLS")
	})
	line := log.String()
	if !strings.Contains(line, "HTTP listener (http_listen") || !strings.Contains(line, "automator=https://"+addr) {
		t.Errorf("the line does not name the likely mix-up or the automator:\n%s", line)
	}
	if n := strings.Count(line, "automator unreachable"); n != 0 {
		t.Errorf("%d lines say the automator is unreachable; want none: something answered, not in TLS:\n%s", n, line)
	}
}
