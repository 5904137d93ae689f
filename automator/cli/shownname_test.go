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
// is refused at submit). `work show --reveal` and `automator audit` quote
// a name that would not show as it is (a bidi override that reverses what
// follows), as `work show` quotes arguments, and write none of its
// characters to the terminal raw.
func TestAScriptNameNotShownAsItIsIsQuotedInShowAndAudit(t *testing.T) {
	t.Parallel()
	s := serveInProcess(t)
	s.account(t, "acme")
	const script = "x\u202ey.sh"
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
	if code != 0 || !strings.Contains(show, "script     "+quoted+"\n") || strings.ContainsAny(show, "\x1b\u202e") {
		t.Errorf("work show --reveal: exit %d, %s\n%q\nwant the script line %s, and no escape or bidi override raw", code, stderr, show, quoted)
	}
	code, audit, stderr := runMain(t, "audit", "--data-dir", s.dir)
	if code != 0 || !strings.Contains(audit, " script="+quoted) || strings.ContainsAny(audit, "\x1b\u202e") {
		t.Errorf("audit: exit %d, %s\n%q\nwant script=%s, and no escape or bidi override raw", code, stderr, audit, quoted)
	}
}
