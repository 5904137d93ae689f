package client_test

import (
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/internal/delayline"
	"github.com/opsgate/opsgate/internal/waittest"
)

// TestACallOverALinkWithALongRoundTripIsAnswered: a caller whose link to
// the automator has a 3 s round trip connects and is answered. The
// connection's setup (TLS 1.3, then HTTP/2's settings) takes two round
// trips here, 6 s: with the whole setup bounded by 5 s, as it was, every
// try dialled again and the client gave up with no automator answering.
func TestACallOverALinkWithALongRoundTripIsAnswered(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{})
	far := delayline.Start(t, a.GRPCAddr, 1500*time.Millisecond)
	c := newClient(t, a, "https://"+far)
	w, err := c.Submit(waittest.Context(t, "Submit over a link with a 3 s round trip to be answered"), a.Account, client.Command{Script: "x.sh"})
	if err != nil || w.ID == "" {
		t.Fatalf("Submit over a link with a 3 s round trip: %+v, %v; want the unit queued", w, err)
	}
}
