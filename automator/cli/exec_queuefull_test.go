//go:build linux

package cli_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/cli"
	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/automator/server"
)

// TestExecRefusedForAFullQueueSaysWhenToTryAgain: exec of a unit the
// automator refuses because the account's queue is at its cap (no proxy
// claims) exits 255 at once with one line that names the limit, says that
// nothing was queued and when to run it again (the automator's RetryInfo,
// 1 s); the queue holds only the unit that filled it.
func TestExecRefusedForAFullQueueSaysWhenToTryAgain(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{Limits: server.Limits{MaxQueuedPerAccount: 1}})
	exec := func() (int, string) {
		var out, errb bytes.Buffer
		code := cli.Main(t.Context(), []string{"exec", "--server", a.URL(), "--api-key-file", a.APIKeyFile, "--ca", a.CAFile,
			"--account", a.Account, "--timeout", "1h", "x.sh"}, cli.Env{Stdout: &out, Stderr: &errb})
		return code, errb.String()
	}
	c, err := client.New(client.Config{Addresses: []string{a.URL()}, APIKey: a.APIKey, CAPEM: a.CAPEM, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Submit(t.Context(), a.Account, client.Command{Script: "x.sh"}, client.WithTimeout(time.Hour)); err != nil {
		t.Fatalf("the unit that fills the queue: %v", err)
	}
	code, msg := exec()
	for _, want := range []string{"max_queued_per_account", "nothing was queued: run it again in 1s or later"} {
		if !strings.Contains(msg, want) {
			t.Errorf("stderr %q: want it to say %q", msg, want)
		}
	}
	if code != cli.ExitError || strings.Count(msg, "\n") != 1 {
		t.Errorf("exit %d, stderr %q; want %d and one line", code, msg, cli.ExitError)
	}
	if n, err := a.Store.WorkQueuedCount(t.Context(), a.Account, 10); n != 1 || err != nil {
		t.Errorf("%d units queued (%v); want the first only", n, err)
	}
}

// TestWorkWaitRefusedForFailedAuthenticationsSaysWhen: `work wait` (as
// `work cancel` and exec) with a wrong API key past its address's budget
// of failed authentications exits 255 with one line saying when the key
// may be tried again, once only. The automator's clock stands still, so
// that the time it names is the whole refill however long the commands
// take (a second command more than half a second after the first made it
// 59s on a loaded machine).
func TestWorkWaitRefusedForFailedAuthenticationsSaysWhen(t *testing.T) {
	t.Parallel()
	a := automatortest.Start(t, automatortest.Options{Limits: server.Limits{FailedAuthBurst: 1, FailedAuthRefill: time.Minute}, Clock: stoppedClock(time.Now())})
	wrong := filepath.Join(t.TempDir(), "wrong.apikey")
	if err := os.WriteFile(wrong, []byte("oak_wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wait := func() (int, string) {
		var out, errb bytes.Buffer
		code := cli.Main(t.Context(), []string{"work", "wait", "--server", a.URL(), "--api-key-file", wrong, "--ca", a.CAFile,
			"w_00000000000000000000000000000001"}, cli.Env{Stdout: &out, Stderr: &errb})
		return code, errb.String()
	}
	if code, msg := wait(); code != cli.ExitError || !strings.Contains(msg, "Unauthenticated") {
		t.Fatalf("a wrong key within the budget: exit %d, stderr %q; want %d, Unauthenticated", code, msg, cli.ExitError)
	}
	code, msg := wait()
	if code != cli.ExitError || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, "too many failed authentications") || strings.Count(msg, "in 1m0s") != 1 {
		t.Errorf("a wrong key past the budget: exit %d, stderr %q; want %d and one line saying to retry in 1m0s, once", code, msg, cli.ExitError)
	}
}

// stoppedClock is an automator's clock that always tells the same time.
type stoppedClock time.Time

func (c stoppedClock) Now() time.Time { return time.Time(c) }
