//go:build linux

package cli

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// TestAScriptNameNotShownAsItIsIsQuotedInShowAndAudit: a caller chooses
// a unit's script name, and the automator stores any plain file name (one
// with a control character, an escape sequence that clears the terminal,
// or an invisible one, a bidi override, is refused at submit, but a unit
// queued before that was may hold one). `work show --reveal` and
// `automator audit` quote a name that would not show as it is (two spaces
// together, shown as one), as `work show` quotes arguments.
func TestAScriptNameNotShownAsItIsIsQuotedInShowAndAudit(t *testing.T) {
	t.Parallel()
	s := serveInProcess(t)
	s.account(t, "acme")
	const script = "x  y.sh"
	if code, _, stderr := runMain(t, "exec", "--data-dir", s.dir, "--account", "acme", "--timeout", "1s", script); code != ExitTimeout {
		t.Fatalf("exec of a unit no proxy claims: exit %d, %s; want %d", code, stderr, ExitTimeout)
	}
	_, out, _ := runMain(t, "work", "list", "--data-dir", s.dir, "--json")
	var units []struct {
		ID string `json:"work_id"`
	}
	if err := json.Unmarshal([]byte(out), &units); err != nil || len(units) != 1 {
		t.Fatalf("work list --json: %q, %v; want one unit", out, err)
	}
	quoted := strconv.Quote(script)
	code, show, stderr := runMain(t, "work", "show", units[0].ID, "--reveal", "--data-dir", s.dir)
	if code != 0 || !strings.Contains(show, "script     "+quoted+"\n") {
		t.Errorf("work show --reveal: exit %d, %s\n%q\nwant the script line %s", code, stderr, show, quoted)
	}
	code, audit, stderr := runMain(t, "audit", "--data-dir", s.dir)
	if code != 0 || !strings.Contains(audit, " script="+quoted) {
		t.Errorf("audit: exit %d, %s\n%q\nwant script=%s", code, stderr, audit, quoted)
	}
}
