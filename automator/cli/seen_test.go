package cli

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
)

// TestRotateAndDeleteNameEveryInstanceSeenWithTheAccount: the operator of
// a rotate-token, rotate-key or account delete is told which instances
// polled with the account, so that none is forgotten: the one polling now
// and, marked as not polling, a warm standby that ran ten days ago and was
// stopped, whose config needs the new profile as much (and which would
// otherwise find out at failover), and, marked as stopped, one stopped
// gracefully a moment ago, whose last poll said so, and, marked as
// refused, one polling with a profile whose keys are no longer usable and
// one polling with the whole profile of before a rotation whose overlap
// has ended.
func TestRotateAndDeleteNameEveryInstanceSeenWithTheAccount(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	if code, _, stderr := runMain(t, "account", "create", "acme", "--data-dir", dir); code != 0 {
		t.Fatalf("account create acme: exit %d: %s", code, stderr)
	}
	st, err := sqlitestore.Open(t.Context(), filepath.Join(dir, "automator.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	for id, at := range map[string]time.Time{"host-a": now, "host-b": now.Add(-10 * 24 * time.Hour), "host-c": now, "host-d": now, "host-e": now} {
		var refused []uint32
		if id == "host-d" {
			refused = []uint32{1}
		}
		if err := st.InstanceSeen(t.Context(), store.InstanceSeenParams{Account: "acme", InstanceID: id, Hostname: id + ".example", Version: "v1.4.0",
			Stopping: id == "host-c", RefusedKeyIDs: refused, TokenExpired: id == "host-e", Now: at}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what, out string) {
		t.Helper()
		var a, b, c, d, e string
		for _, l := range strings.Split(out, "\n") {
			switch {
			case strings.HasPrefix(l, "  host-e "):
				e = l
			case strings.HasPrefix(l, "  host-d "):
				d = l
			case strings.HasPrefix(l, "  host-a "):
				a = l
			case strings.HasPrefix(l, "  host-b "):
				b = l
			case strings.HasPrefix(l, "  host-c "):
				c = l
			}
		}
		if d == "" || !strings.Contains(d, "REFUSED (it polls holding key ids [1], none usable)") {
			t.Errorf("%s: the instance polling with a profile of before a key rotation is %q, want it listed as refused; output:\n%s", what, d, out)
		}
		if e == "" || !strings.Contains(e, "REFUSED (it polls with the account token of before a rotation whose overlap has ended)") {
			t.Errorf("%s: the instance polling with the whole profile of before a rotation is %q, want it listed as refused for its token; output:\n%s", what, e, out)
		}
		if c == "" || !strings.Contains(c, "STOPPED (it said so at its last poll") {
			t.Errorf("%s: the instance stopped a moment ago is %q, want it listed as stopped; output:\n%s", what, c, out)
		}
		if a == "" || strings.Contains(a, "NOT POLLING") {
			t.Errorf("%s: the instance polling now is %q, want it listed as polling; output:\n%s", what, a, out)
		}
		if b == "" || !strings.Contains(b, "NOT POLLING NOW (a stopped standby?)") {
			t.Errorf("%s: the instance stopped ten days ago is %q, want it listed as not polling; output:\n%s", what, b, out)
		}
	}
	for _, cmd := range []string{"rotate-token", "rotate-key"} {
		code, _, stderr := runMain(t, "account", cmd, "acme", "--data-dir", dir, "--overlap", "1h")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", cmd, code, stderr)
		}
		check(cmd, stderr)
	}
	code, stdout, stderr := runMain(t, "account", "delete", "acme", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("account delete: exit %d: %s", code, stderr)
	}
	check("account delete", stdout)
}
