package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/grpcwire"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// ShortProxyEnv, set to a ShortProxy in JSON, makes the test binary run
// an agent as a proxy process of its own (runShortProxy), for a test that
// takes resources of that process away (its limit of open files).
const ShortProxyEnv = "OPSGATE_TEST_SHORT_PROXY"

// ShortProxy is what the agent of runShortProxy serves: an automator
// serving plaintext gRPC at Addr, its account's Token and Key (as
// crypto.Key's String), the scripts in ScriptsDir; StartWaitFor, when set,
// bounds the wait of a start that lacked resources (tuning).
type ShortProxy struct {
	Addr, Token, Key, ScriptsDir, InstanceID string
	MaxConcurrency                           int
	StartWaitFor                             time.Duration
}

// runShortProxy runs the agent sp describes (its log on stderr, as a
// proxy's) until stdin ends, then stops it.
func runShortProxy(spec string) int {
	var sp ShortProxy
	if err := json.Unmarshal([]byte(spec), &sp); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	key, err := crypto.ParseKey(sp.Key)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	conn, err := grpc.NewClient("passthrough:///"+sp.Addr, append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(grpcwire.Bearer(sp.Token, false)),
	}, grpcwire.WatchAnswers()...)...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer conn.Close()
	a := New(Options{
		tune:   tuning{startWaitFor: sp.StartWaitFor},
		Client: automatorv1.NewProxyServiceClient(conn), Keys: crypto.Keys{key},
		InstanceID: sp.InstanceID, ScriptsDir: sp.ScriptsDir, MaxConcurrency: sp.MaxConcurrency,
		PollWait: time.Second, BackoffMin: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	_ = a.Run(ctx)
	return 0
}
