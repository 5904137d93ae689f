package cli

import (
	"context"
	"net"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/opsgate/opsgate/internal/waittest"
)

// fakeDNS answers A queries for every name with 127.0.0.1 over UDP on
// loopback, and records the type of every question it is asked.
type fakeDNS struct {
	pc    net.PacketConn
	mu    sync.Mutex
	asked []dnsmessage.Type
	gotA  chan struct{} // closed at the first A question
	once  sync.Once
}

func newFakeDNS(t *testing.T) *fakeDNS {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &fakeDNS{pc: pc, gotA: make(chan struct{})}
	done := make(chan struct{})
	t.Cleanup(func() { pc.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var m dnsmessage.Message
			if m.Unpack(buf[:n]) != nil || len(m.Questions) != 1 {
				continue
			}
			q := m.Questions[0]
			d.mu.Lock()
			d.asked = append(d.asked, q.Type)
			d.mu.Unlock()
			reply := dnsmessage.Message{Header: dnsmessage.Header{ID: m.ID, Response: true, Authoritative: true}, Questions: m.Questions}
			if q.Type == dnsmessage.TypeA {
				reply.Answers = []dnsmessage.Resource{{
					Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 60},
					Body:   &dnsmessage.AResource{A: [4]byte{127, 0, 0, 1}},
				}}
				d.once.Do(func() { close(d.gotA) })
			}
			if out, err := reply.Pack(); err == nil {
				_, _ = pc.WriteTo(out, from)
			}
		}
	}()
	return d
}

// TestTheProxyLooksUpNoServiceConfigInDNS: the proxy resolves the
// automator's name without gRPC's lookup of a service config in a TXT
// record (resolveOptions), which a DNS server that does not answer held 10
// s at every start, even for a name the hosts file has. Here a DNS server
// of the test's, asked through gRPC's resolver with the proxy's options,
// is asked for the name's addresses and for nothing else.
func TestTheProxyLooksUpNoServiceConfigInDNS(t *testing.T) {
	t.Parallel()
	d := newFakeDNS(t)
	conn, err := grpc.NewClient("dns://"+d.pc.LocalAddr().String()+"/automator.test:1",
		append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, resolveOptions...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Connect()
	waittest.Recv(t, d.gotA, "the resolver to ask for the automator's address")
	// The resolver asks for the TXT record, when it does, after the
	// addresses and before it hands them on: once the connection has
	// tried them (left IDLE and CONNECTING), it has asked everything.
	ctx, cancel := context.WithTimeout(context.Background(), waittest.Bound)
	defer cancel()
	for st := conn.GetState(); st.String() == "IDLE" || st.String() == "CONNECTING"; st = conn.GetState() {
		if !conn.WaitForStateChange(ctx, st) {
			break
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, q := range d.asked {
		if q == dnsmessage.TypeTXT {
			t.Fatalf("the DNS server was asked %v: a TXT question among them (gRPC's service config)", d.asked)
		}
	}
}
