//go:build linux

package chaos

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/proctest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestProxyBehindConnectProxyServesAndSurvivesItsRestart: a proxy whose
// only way out is an outbound HTTP CONNECT proxy (HTTPS_PROXY; the
// automator's name resolves nowhere but in the CONNECT proxy, as in many
// customer networks) serves work over TLS through it. When the CONNECT
// proxy is killed and started again, the instance reconnects by itself and
// the work queued meanwhile (unclaimed) is all run, once each. Its log
// names the web proxy it dials through, at its start and in the line that
// says the automator is unreachable.
func TestProxyBehindConnectProxyServesAndSurvivesItsRestart(t *testing.T) {
	t.Parallel()
	const host = "automator.chaos.test"
	if addrs, err := net.LookupHost(host); err == nil {
		t.Fatalf("%s resolves (%v); the test needs a name only the CONNECT proxy knows", host, addrs)
	}
	s := newSmall(t, host)
	target := fmt.Sprintf("%s:%d", host, s.auto.Port)
	connect, err := NewConnectProxy(map[string]string{target: s.auto.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(connect.Close)
	in := newInstance(t, s.dir, "behind", s.profile, s.publicURL(), s.scripts, 4,
		map[string]string{"HTTPS_PROXY": "http://" + connect.Addr()})
	if err := in.StartPolling(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	if n := connect.Connects(target); n < 1 {
		t.Fatalf("the instance polls, but opened %d tunnels through the CONNECT proxy", n)
	}

	var ids, wants []string
	for i := range 10 {
		id, want := s.submit(t, fmt.Sprintf("before-%d", i), time.Minute)
		ids, wants = append(ids, id), append(wants, want)
	}
	s.mustSucceed(t, ids, wants, time.Minute)

	// Kill the CONNECT proxy: the instance's poll dies with its tunnel.
	unreachable := in.Proc().Watch("automator unreachable")
	connect.Kill()
	mustAwait(t, in.Proc(), unreachable, 15*time.Second, "the instance to notice the CONNECT proxy is gone")
	// Its log says which way it dials, at its start and when the way
	// fails: the CONNECT proxy's outage looks like the automator's.
	for _, line := range []string{"proxy starting", "automator unreachable"} {
		select {
		case <-in.Proc().Seen(line, "HTTPS_PROXY=http://"+connect.Addr(), target+" through that web proxy"):
		default:
			t.Errorf("the instance's %q line does not say it dials %s through the web proxy %s:\n%s", line, target, connect.Addr(), in.Proc().Tail(20))
		}
	}
	// And the automator: until it has seen the tunnel go, a unit queued now
	// would be handed to the dead poll and lost with it (a connection is
	// reset, docs/failure-semantics.md).
	s.awaitNoOpenPolls(t, "acme", 15*time.Second)
	ids, wants = nil, nil
	for i := range 10 {
		id, want := s.submit(t, fmt.Sprintf("during-%d", i), time.Minute)
		ids, wants = append(ids, id), append(wants, want)
	}
	for _, id := range ids {
		if st := s.get(t, id); st.GetState() != automatorv1.State_STATE_QUEUED {
			t.Fatalf("with the CONNECT proxy down, unit %s is %v; want QUEUED", id, st.GetState())
		}
	}

	tunnels := connect.Connects(target)
	reconnected := in.Proc().Watch("connected to the automator; polling")
	if err := connect.Start(); err != nil {
		t.Fatal(err)
	}
	mustAwait(t, in.Proc(), reconnected, 30*time.Second, "the instance to reconnect through the CONNECT proxy")
	s.mustSucceed(t, ids, wants, time.Minute)
	if connect.Connects(target) <= tunnels {
		t.Errorf("the work ran, but not through a new tunnel of the CONNECT proxy")
	}
	if n := in.Proc().Count("automator unreachable"); n != 1 {
		t.Errorf("%d \"automator unreachable\" lines for one outage, want 1 (one per change of state):\n%s", n, in.Proc().Tail(20))
	}
}

// TestDeadConnectionIsNoticedWithinSecondsAndItsLostClaimFails: a middlebox that silently
// forgets an idle connection (nothing arrives, nothing is reset) would
// leave a proxy waiting on a dead long poll. The keepalive (a ping after
// 10s of silence, 5s for its answer) notices within 15s of the last bytes
// the proxy received, which came before the stall; the proxy dials again
// and serves work. The automator, which hears nothing of it, still
// holds the dead poll: the proxy's first poll on the new connection
// supersedes it, so the unit queued next goes to the live poll rather than
// being lost with the dead one. A unit queued before the proxy noticed was
// handed to the dead poll and never arrived: the proxy's next poll says so
// (lost_from), and the unit fails at once, its script never run, rather
// than at its deadline.
func TestDeadConnectionIsNoticedWithinSecondsAndItsLostClaimFails(t *testing.T) {
	t.Parallel()
	s := newSmall(t, "127.0.0.1")
	r, err := NewRelay(s.auto.Addr(), false, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	in := newInstance(t, s.dir, "a", s.profile, "https://"+r.Addr(), s.scripts, 4, nil)
	if err := in.StartPolling(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	redialled := r.AcceptedAbove(r.Accepted())
	proctest.AwaitOpenPolls(t, s.auto.DataDir, "acme", 1, 10*time.Second) // its long poll, after the first
	stalled := time.Now()
	n, heard := r.StallExisting()
	if n != 1 {
		t.Fatalf("stalled %d connections, want the instance's one", n)
	}
	// The automator still holds the instance's poll, which claims this
	// (a unit the new poll took would succeed, below).
	lost, _ := s.submit(t, "lost", 5*time.Minute)
	// From the last bytes the instance received (here the answer to its
	// first poll), where the keepalive's 10s start, not from the stall, which
	// the test makes later (by as long as AwaitOpenPolls takes to see the
	// poll): 10s + 5s keepalive, the first retry, a dial, and room for a
	// loaded machine.
	const bound = 20 * time.Second
	mustAwait(t, in.Proc(), redialled, bound, "the instance to give up the dead connection and dial again")
	noticed := time.Since(heard)
	t.Logf("dead connection noticed, and dialled again, %v after the last bytes the instance received (%v after the stall)",
		noticed.Round(time.Millisecond), time.Since(stalled).Round(time.Millisecond))
	if noticed > bound {
		t.Errorf("the instance dialled again %v after the last bytes it received, want within %v", noticed.Round(time.Millisecond), bound)
	}
	// The instance's own line, not gRPC's (GRPC_GO_LOG_SEVERITY_LEVEL=info
	// logs the keepalive's failure too), wherever it is in its log.
	if err := await(in.Proc(), in.Proc().Seen("automator unreachable", "keepalive"), 10*time.Second); err != nil {
		t.Errorf("the instance did not say the keepalive failed: %v", err)
	}
	st := s.wait(t, lost, 30*time.Second) // not its deadline, 5 minutes away
	if st.GetState() != automatorv1.State_STATE_FAILED || !strings.HasSuffix(st.GetReason(), UndeliveredReason) {
		t.Errorf("the unit handed to the dead poll ended %v (%q), want failed as never delivered", st.GetState(), st.GetReason())
	}
	id, want := s.submit(t, "after", time.Minute)
	s.mustSucceed(t, []string{id}, []string{want}, time.Minute)
	for _, e := range readExecs(t, s.execLog) {
		if e.WorkID == lost {
			t.Errorf("the unit handed to the dead poll ran on %s", e.Instance)
		}
	}
}

// TestRefusedConnectionsBackOffQuietly: while the automator is down every
// dial is refused. The proxy backs off (it uses almost no CPU: no busy
// loop), logs the outage once rather than per attempt, and resumes by
// itself when the automator is back.
func TestRefusedConnectionsBackOffQuietly(t *testing.T) {
	t.Parallel()
	s := newSmall(t, "127.0.0.1")
	in := newInstance(t, s.dir, "a", s.profile, s.publicURL(), s.scripts, 4, nil)
	if err := in.StartPolling(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	p := in.Proc()
	unreachable := p.Watch("automator unreachable")
	s.auto.Kill()
	mustAwait(t, p, unreachable, 15*time.Second, "the instance to notice the automator is gone")

	// Observe the instance for a while with every dial refused.
	const window = 8 * time.Second
	before := cpuTime(t, p.PID())
	time.Sleep(window)
	used := cpuTime(t, p.PID()) - before
	t.Logf("CPU used in %v of refused connections: %v", window, used)
	if used > window/8 {
		t.Errorf("the instance used %v of CPU in %v while the automator was down: a busy loop", used, window)
	}
	if n := p.Count("automator unreachable"); n != 1 {
		t.Errorf("%d \"automator unreachable\" lines in %v of refusals, want 1:\n%s", n, window, p.Tail(20))
	}

	reconnected := p.Watch("connected to the automator; polling")
	back := time.Now()
	if err := s.auto.Serve(); err != nil {
		t.Fatal(err)
	}
	// The poll backoff is capped at 15s, gRPC's own reconnect backoff at
	// about as much after a short outage.
	mustAwait(t, p, reconnected, 40*time.Second, "the instance to resume polling")
	t.Logf("polling again %v after the automator came back", time.Since(back).Round(time.Millisecond))
	id, want := s.submit(t, "after", time.Minute)
	s.mustSucceed(t, []string{id}, []string{want}, time.Minute)
}
