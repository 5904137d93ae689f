package cli

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/opsgate/opsgate/internal/grpcwire"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/config"
)

// headersFirst answers each poll's headers at once, and its message only
// once release is closed: an answer still on its way.
type headersFirst struct {
	automatorv1.UnimplementedProxyServiceServer
	release chan struct{}
}

func (h headersFirst) Poll(ctx context.Context, _ *automatorv1.PollRequest) (*automatorv1.PollResponse, error) {
	if err := grpc.SendHeader(ctx, metadata.MD{}); err != nil {
		return nil, err
	}
	<-h.release
	return &automatorv1.PollResponse{}, nil
}

// TestAPollIsToldWhenItsAnswerBegins: the proxy's connection tells a poll
// when its answer's headers arrive, before its message, so the agent gives
// an answer on its way the time its transfer takes
// (grpcwire.AnswerStarts; TestAPollWhoseAnswerIsOnItsWayIsNotCutOffAtTheEndOfItsWait).
func TestAPollIsToldWhenItsAnswerBegins(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	release := make(chan struct{})
	automatorv1.RegisterProxyServiceServer(srv, headersFirst{release: release})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	defer close(release)

	conn, err := Dial(config.Config{AutomatorURL: "http://" + lis.Addr().String(), Token: "opt_x"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	began := make(chan struct{})
	ctx := grpcwire.WhenAnswerStarts(context.Background(), func() { close(began) })
	go func() { _, _ = automatorv1.NewProxyServiceClient(conn).Poll(ctx, &automatorv1.PollRequest{}) }()
	waittest.Recv(t, began, "the poll to be told that its answer began, while its message is held back")
}
