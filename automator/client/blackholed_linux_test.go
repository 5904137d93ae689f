package client_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/internal/closedport"
)

// TestAnAddressWhoseDialGoesUnansweredIsToldAsNotConnected: a try that
// waited its bound for a connection whose dial nothing answers (a host
// down, a firewall dropping the packets) is told as an address that could
// not be connected to, saying so, not hung: nothing accepted the
// connection, so nothing there is stopped, frozen or stuck. Before, it
// was told as an automator not answering its call (a review: a name all
// of whose addresses were black-holed read "is not answering: its answer
// did not begin within 10s").
func TestAnAddressWhoseDialGoesUnansweredIsToldAsNotConnected(t *testing.T) {
	t.Parallel()
	ca, err := pki.NewCA("test CA", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + closedport.Blackholed(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var told unreachables
	c, err := client.New(client.Config{Addresses: []string{url}, APIKey: "oak_x", CAPEM: ca.CertPEM, ServerName: "127.0.0.1", RetryFor: time.Minute,
		OnUnreachable: told.tellAndEnd(cancel)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Get(ctx, "w_0123456789abcdef0123456789abcdef"); err == nil {
		t.Fatal("Get succeeded")
	}
	u := told.once(t, " before the call ended")
	if u.Hung || u.Kind != client.KindNotConnected || u.Address != url || u.Err == nil || !strings.Contains(u.Err.Error(), "its dial goes unanswered") {
		t.Fatalf("OnUnreachable told %+v; want not hung, %v, the address %s, an error saying its dial goes unanswered", u, client.KindNotConnected, url)
	}
}
