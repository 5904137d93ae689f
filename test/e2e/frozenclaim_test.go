//go:build linux

package e2e

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/waittest"
)

// TestAProxyStoppedWhileItsClaimWaitedKeepsTheAutomatorsDeadline: a unit
// handed to the waiting poll of a proxy that is stopped (SIGSTOP: a
// debugger, a frozen VM) is read once the proxy runs again, its time partly
// spent. Its deadline, and the PROXY_DEADLINE_SECONDS its script is told,
// still end no later than the unit's deadline on the automator: before,
// the proxy counted the whole time remaining from when it read the claim,
// and a script resumed 25 s late ran 12 s past the unit's deadline (a
// review). The script prints when it was told its deadline is. A unit
// handed to the same poll after the stop is over keeps its whole time.
func TestAProxyStoppedWhileItsClaimWaitedKeepsTheAutomatorsDeadline(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	cfg := a.createAccount(t, "acme")
	scripts := t.TempDir()
	writeScript(t, scripts, "deadline.sh", `echo $(( $(date +%s) + PROXY_DEADLINE_SECONDS ))`)
	p := startProxy(t, cfg, scripts, "p")
	p.WaitPolling(t)

	p.Signal(t, syscall.SIGSTOP)
	t.Cleanup(func() { p.Signal(t, syscall.SIGCONT) })
	exec := a.StartExec(t, "--account", "acme", "--timeout", "30s", "deadline.sh")
	// Handed to the stopped proxy's waiting poll (stored as its claim).
	for end := time.Now().Add(waittest.Bound); a.inFlight(t, "acme")["p"] != 1; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the unit was not claimed by the stopped proxy's waiting poll within %v", waittest.Bound)
		}
	}
	queuedBy := time.Now() // the unit's deadline is at most 30 s after this
	// The stop is the fault tested: it lasts this long.
	time.Sleep(8 * time.Second)
	p.Signal(t, syscall.SIGCONT)

	r := exec.Wait(t, time.Minute)
	if r.Code != 0 {
		t.Fatalf("exec: %v; want the script run", r)
	}
	told, err := strconv.ParseInt(strings.TrimSpace(r.Stdout), 10, 64)
	if err != nil {
		t.Fatalf("exec printed %q: %v", r.Stdout, err)
	}
	// Whole seconds: the script's clock is read after the proxy's, and
	// PROXY_DEADLINE_SECONDS rounds down, so a second of slack.
	if latest := queuedBy.Add(30 * time.Second).Unix(); told > latest+1 {
		t.Errorf("the script was told its deadline is %s, %d s after the unit's (by %s at the latest): the stop's 8 s were counted again",
			time.Unix(told, 0).UTC().Format(time.RFC3339), told-latest, time.Unix(latest, 0).UTC().Format(time.RFC3339))
	}

	// A unit handed to a poll that waited through a stop long over (the
	// poll sent before it, the unit queued seconds after it) has its whole
	// time: a re-review found every claim of the rest of such a poll cut
	// by the stop, short ones to nothing.
	p.WaitPolling(t)
	p.Signal(t, syscall.SIGSTOP)
	time.Sleep(2 * time.Second) // the stop
	p.Signal(t, syscall.SIGCONT)
	time.Sleep(3 * time.Second) // long over
	queuedFrom := time.Now()    // the unit's deadline is at least 20 s after this
	r = a.Exec("--account", "acme", "--timeout", "20s", "deadline.sh")
	if r.Code != 0 {
		t.Fatalf("exec after the stop was over: %v; want the script run", r)
	}
	if told, err = strconv.ParseInt(strings.TrimSpace(r.Stdout), 10, 64); err != nil {
		t.Fatalf("exec printed %q: %v", r.Stdout, err)
	}
	// Whole seconds again: two of slack.
	if earliest := queuedFrom.Add(20 * time.Second).Unix(); told < earliest-2 {
		t.Errorf("a unit queued 3 s after a stop was over was told its deadline is %s, %d s before the unit's (%s at the earliest): the stop was counted against it",
			time.Unix(told, 0).UTC().Format(time.RFC3339), earliest-told, time.Unix(earliest, 0).UTC().Format(time.RFC3339))
	}
}
