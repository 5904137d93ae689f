package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/cli"
	"github.com/opsgate/opsgate/automator/store"
)

// TestWorkShowThroughTheServerGivesTheUnitAndItsOutput: a caller away from
// the automator's host (--server) learns how a unit ended and, with
// --reveal, what it printed, byte for byte: exec, once it has given up
// waiting, tells it to follow the unit by id, and work wait gives no
// output. The API gives no command, which the text says. A malformed id
// is refused without a call, an unknown one named.
func TestWorkShowThroughTheServerGivesTheUnitAndItsOutput(t *testing.T) {
	t.Parallel()
	a := startWithScript(t, "bin.sh", `printf 'out\377'; printf 'err\n' >&2; exit 4`)
	remote := remoteFlags(a)
	run := mainCLI
	code, _, stderr := run(append(append([]string{"exec"}, remote...), "--account", "acme", "--timeout", "30s", "bin.sh")...)
	if code != 4 {
		t.Fatalf("exec: exit %d, stderr %q; want the script's 4", code, stderr)
	}
	list, err := a.Store.WorkList(context.Background(), store.WorkListParams{Limit: 10})
	if err != nil || len(list) != 1 {
		t.Fatalf("units: %v, %v; want the one exec queued", list, err)
	}
	id := list[0].ID

	code, out, stderr := run(append(append([]string{"work", "show", id}, remote...), "--reveal", "--json")...)
	var v struct {
		ExitCode *int `json:"exit_code"`
		Output   struct {
			Stdout       *string `json:"stdout"`
			Stderr       *string `json:"stderr"`
			StdoutBase64 []byte  `json:"stdout_base64"`
		} `json:"output"`
		Command any `json:"command"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
		t.Fatalf("work show --server --reveal --json: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if v.ExitCode == nil || *v.ExitCode != 4 || v.Output.Stdout != nil || v.Output.Stderr == nil || *v.Output.Stderr != "err\n" ||
		string(v.Output.StdoutBase64) != "out\xff" || v.Command != nil || !strings.Contains(out, `"state": "succeeded"`) || !strings.Contains(out, `"instance_id": "a"`) {
		t.Errorf("work show --server --reveal --json: %s; want the unit succeeded on a with exit code 4, its stdout exact in base64 (null as text: not UTF-8), its stderr, no command", out)
	}

	code, out, _ = run(append(append([]string{"work", "show", id}, remote...), "--reveal")...)
	for _, want := range []string{"state      succeeded", "exit code  4", "command    (not given by the API", "---- stdout ----\nout\xff\n---- stderr ----\nerr\n"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("work show --server --reveal: exit %d, %q; want it to hold %q", code, out, want)
		}
	}
	if code, out, _ = run(append([]string{"work", "show", id}, remote...)...); code != 0 || strings.Contains(out, "out\xff") || !strings.Contains(out, "command    (not given by the API; --reveal gives the output)") {
		t.Errorf("work show --server without --reveal: exit %d, %q; want no output, and how to reveal it", code, out)
	}

	for _, c := range []struct{ id, want string }{
		{"w_nope", `showing work "w_nope": not a work id`},
		{"w_ffffffffffffffffffffffffffffffff", `there is no unit of work "w_ffffffffffffffffffffffffffffffff" that this API key may see`},
	} {
		if code, _, stderr := run(append([]string{"work", "show", c.id}, remote...)...); code != cli.ExitError || !strings.Contains(stderr, c.want) {
			t.Errorf("work show %s --server: exit %d, stderr %q; want %d and %q", c.id, code, stderr, cli.ExitError, c.want)
		}
	}
	if code, _, stderr := run(append(append([]string{"work", "show", id}, remote...), "--db", "x.db")...); code != cli.ExitError || !strings.Contains(stderr, "--db is for --data-dir") {
		t.Errorf("work show --server --db: exit %d, stderr %q; want it refused", code, stderr)
	}
}
