//go:build linux

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// A proxy outlives its automator's restarts, crashes and clean stops alike:
// each one leaves it nothing more to hold. After ten of them, each followed
// by a unit it ran for the automator started again, the proxy has no more
// open files than after its first unit (a connection, a TLS session or a
// poll kept from a dead automator would each hold one).
func TestAProxyHoldsNothingMoreAfterItsAutomatorRestarts(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	cfg := a.createAccount(t, "acme")
	p := startProxy(t, cfg, t.TempDir(), "a")
	p.WaitPolling(t)
	c := a.Client(t)
	// ping runs one @ping unit, calling again while the automator is
	// unavailable (starting) or the proxy not yet polling it.
	ping := func(what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for {
			st, err := c.ExecuteOnProxy(ctx, &automatorv1.ExecuteRequest{Account: "acme",
				Command: &automatorv1.Command{Script: "@ping"}})
			switch {
			case status.Code(err) == codes.Unavailable && ctx.Err() == nil:
				time.Sleep(100 * time.Millisecond)
				continue
			case err != nil:
				t.Fatalf("%s: %v", what, err)
			case st.State != automatorv1.State_STATE_SUCCEEDED:
				t.Fatalf("%s: ended %v (%s)", what, st.State, st.Reason)
			}
			return
		}
	}
	fds := func() int {
		t.Helper()
		entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.Pid()))
		if err != nil {
			t.Fatal(err)
		}
		return len(entries)
	}
	ping("the first unit")
	base := fds()

	for i := range 10 {
		if i%2 == 0 {
			a.Kill(t)
		} else {
			a.proc.Signal(t, syscall.SIGTERM)
			if code := a.proc.Wait(t, 30*time.Second); code != 0 {
				t.Fatalf("serve stopped with exit %d", code)
			}
		}
		a.Restart(t)
		ping(fmt.Sprintf("the unit after restart %d", i+1))
	}
	// What the proxy let go of a dead automator is closed at once; allow
	// the last connection's replacement a moment.
	var now int
	if !poll(10*time.Second, func() bool { now = fds(); return now <= base+3 }) {
		links, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.Pid()))
		var what []string
		for _, l := range links {
			target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", p.Pid(), l.Name()))
			what = append(what, l.Name()+" → "+target)
		}
		t.Fatalf("after 10 restarts of its automator the proxy holds %d open files, %d after its first unit:\n%s", now, base, strings.Join(what, "\n"))
	}
	t.Logf("open files of the proxy: %d after its first unit, %d after 10 restarts", base, now)
}
