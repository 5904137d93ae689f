package grpcwire_test

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/opsgate/opsgate/internal/grpcwire"
	"github.com/opsgate/opsgate/internal/grpcwire/wiretest"
)

// TestServerAnnouncesFixedWindowsAndSendsNoBDPPings speaks HTTP/2 to a
// server built with ServerOptions: it announces the fixed windows, and data
// arriving on a stream draws no PING (a bandwidth probe) from it.
func TestServerAnnouncesFixedWindowsAndSendsNoBDPPings(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpcwire.ServerOptions()...)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)

	c, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wiretest.CheckServer(t, c)
}

// TestClientAnnouncesFixedWindowsAndSendsNoBDPPings plays the server for a
// client dialled with DialOptions: the client announces the fixed windows,
// and a response's data draws no PING from it.
func TestClientAnnouncesFixedWindowsAndSendsNoBDPPings(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	cc, err := grpc.NewClient("passthrough:///"+lis.Addr().String(),
		append(grpcwire.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cc.Connect()
	c, err := lis.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != http2.ClientPreface {
		t.Fatalf("client preface: %q, %v", preface, err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	w, err := wiretest.ReadWindows(fr)
	if err != nil {
		t.Fatal(err)
	}
	if w != wiretest.Want {
		t.Errorf("windows %+v, want %+v", w, wiretest.Want)
	}
	if err := fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}
	// Called only now, so that ReadWindows cannot have read the request.
	called := make(chan error, 1)
	go func() { called <- cc.Invoke(ctx, "/wiretest.Probe/Call", &emptypb.Empty{}, &emptypb.Empty{}) }()
	// The request: headers, then data that ends the stream.
	var stream uint32
	for stream == 0 {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if d, ok := f.(*http2.DataFrame); ok && d.StreamEnded() {
			stream = d.StreamID
		}
	}
	block := wiretest.Headers(":status", "200", "content-type", "application/grpc")
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: block, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteData(stream, false, make([]byte, 5)); err != nil {
		t.Fatal(err)
	}
	pinged, err := wiretest.PingedBeforeProbe(fr)
	if err != nil {
		t.Fatal(err)
	}
	if pinged {
		t.Error("the client sent a PING on receiving data: a bandwidth probe of dynamic windows")
	}
	block = wiretest.Headers("grpc-status", "0")
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: block, EndHeaders: true, EndStream: true}); err != nil {
		t.Fatal(err)
	}
	if err := <-called; err != nil {
		t.Fatalf("the call failed: %v", err)
	}
}
