package client_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/client"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// thinUplinkAutomator stands for an automator behind a caller's uplink of
// rate bytes a second: a submit is queued when its deadline leaves the time
// its request takes to send, and otherwise runs until its deadline and
// fails, as a call cut off mid-upload does.
type thinUplinkAutomator struct {
	automatorv1.UnimplementedAutomatorServiceServer
	rate int

	mu      sync.Mutex
	submits int
}

func (a *thinUplinkAutomator) Submit(ctx context.Context, req *automatorv1.ExecuteRequest) (*automatorv1.WorkStatus, error) {
	a.mu.Lock()
	a.submits++
	a.mu.Unlock()
	takes := time.Duration(proto.Size(req)) * time.Second / time.Duration(a.rate)
	if end, ok := ctx.Deadline(); ok && time.Until(end) < takes {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return &automatorv1.WorkStatus{WorkId: "w_0000000000000000000000000000000b", Account: req.GetAccount(), State: automatorv1.State_STATE_QUEUED, Remaining: durationpb.New(time.Minute)}, nil
}

// TestASubmitWithALargeStdinIsGivenTheTimeItsSizeTakes: a submit carrying
// 1 MiB of stdin over an uplink that takes 16 s to send it (about
// 512 kbit/s) is given that time, and sent once, rather than cut off after
// the 10 s of a try and sent again from its first byte until the client
// gives up.
func TestASubmitWithALargeStdinIsGivenTheTimeItsSizeTakes(t *testing.T) {
	a := &thinUplinkAutomator{rate: 64 << 10}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.MaxRecvMsgSize(8 << 20))
	automatorv1.RegisterAutomatorServiceServer(srv, a)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	c, err := client.New(client.Config{Addresses: []string{"http://" + lis.Addr().String()}, APIKey: "oak_test", RetryFor: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err := c.Submit(context.Background(), "acme", client.Command{Script: "x.sh"}, client.WithStdin(make([]byte, 1<<20)))
	if err != nil {
		t.Fatalf("submit with 1 MiB of stdin: %v", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.submits != 1 || w.ID == "" {
		t.Fatalf("%d submits, work %q; want one, queued", a.submits, w.ID)
	}
}
