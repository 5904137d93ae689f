//go:build linux

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/client"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestWorkWaitShowsProgressOnATerminalOnly waits for units with known
// outcomes: a progress line redrawn in place on a terminal, nothing on
// stderr elsewhere, and the same table or JSON on stdout.
func TestWorkWaitShowsProgressOnATerminalOnly(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	scripts := t.TempDir()
	automatortest.WriteScript(t, scripts, "exit.sh", `exit "$1"`)
	a.StartProxy(t, automatortest.ProxyOptions{InstanceID: "p1", ScriptsDir: scripts}).WaitPolling(t)
	c, err := client.New(client.Config{Addresses: []string{a.URL()}, APIKey: a.APIKey, CAPEM: a.CAPEM})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var ids []string
	for _, cmd := range []client.Command{
		{Script: "exit.sh", Args: []string{"0"}},
		{Script: "exit.sh", Args: []string{"0"}},
		{Script: "exit.sh", Args: []string{"4"}},
		{Script: "missing.sh"},
	} {
		w, err := c.Submit(t.Context(), a.Account, cmd)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, w.ID)
	}
	wait := func(terminal bool, extra ...string) (int, string, string) {
		t.Helper()
		isTerminal = func(io.Writer) bool { return terminal }
		t.Cleanup(func() { isTerminal = func(io.Writer) bool { return false } })
		var out, errb bytes.Buffer
		args := append([]string{"work", "wait"}, ids...)
		args = append(args, "--server", a.URL(), "--api-key-file", a.APIKeyFile, "--ca", a.CAFile)
		code := Main(t.Context(), append(args, extra...), Env{Stdout: &out, Stderr: &errb})
		return code, out.String(), errb.String()
	}

	code, out, progress := wait(true)
	if code != ExitNotAllSucceeded {
		t.Errorf("exit %d with a unit exiting 4 and one failed, want %d; stderr %q", code, ExitNotAllSucceeded, progress)
	}
	if !strings.HasPrefix(progress, "\rwaiting for 4 units: 0 ended, 4 open, ") ||
		!strings.Contains(progress, "\rwaiting for 4 units: 4 ended (3 succeeded, 1 failed), 0 open, ") ||
		!strings.HasSuffix(progress, "\n") || strings.Count(progress, "\r") != 5 {
		t.Errorf("progress on a terminal = %q, want a line redrawn once per unit, ending in a newline", progress)
	}
	// The failure's reason names the scripts directory, a long path:
	// the line under the table may say it was cut.
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 6 && strings.HasPrefix(lines[5], "reasons ending in …") {
		lines = lines[:5]
	}
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "WORK ID") {
		t.Fatalf("table = %q", out)
	}
	for i, want := range []string{"succeeded  0", "succeeded  0", "succeeded  4", "failed     -"} {
		if !strings.HasPrefix(lines[i+1], ids[i]) || !strings.Contains(lines[i+1], want) {
			t.Errorf("row %d = %q, want unit %s %s", i, lines[i+1], ids[i], want)
		}
	}

	code, out, progress = wait(false, "--json")
	if progress != "" {
		t.Errorf("progress written to a non-terminal: %q", progress)
	}
	var got []waitJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != 4 || code != ExitNotAllSucceeded {
		t.Fatalf("--json: exit %d, %q, %v", code, out, err)
	}
	if got[2].ExitCode == nil || *got[2].ExitCode != 4 || got[3].State != "failed" || got[3].ExitCode != nil {
		t.Errorf("--json = %+v", got)
	}

	// Only units that all succeeded with 0 make exit 0.
	ids = ids[:2]
	if code, _, _ := wait(false); code != 0 {
		t.Errorf("two units that exited 0: exit %d, want 0", code)
	}

	// An unknown unit: one line naming it once; the id is refused, the
	// command did not fail, so exit 1 as work cancel's.
	ids = []string{"w_0123456789abcdef0123456789abcdef"}
	code, out, msg := wait(false)
	if code != ExitNotAllSucceeded || strings.Count(msg, "waiting for work "+ids[0]) != 1 || !strings.Contains(msg, "no such unit") || out != "" {
		t.Errorf("an unknown unit: exit %d, stdout %q, stderr %q; want %d, no table and one line naming it once", code, out, msg, ExitNotAllSucceeded)
	}
}

// TestWorkWaitNamesAnUnknownIDAndStillWaitsForTheOthers: an id that is
// unknown or malformed gets one line on stderr naming it, the other units
// are still waited for and listed, and the exit status is 1, as docs/api.md
// and the help say.
func TestWorkWaitNamesAnUnknownIDAndStillWaitsForTheOthers(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	scripts := t.TempDir()
	automatortest.WriteScript(t, scripts, "exit.sh", `exit "$1"`)
	a.StartProxy(t, automatortest.ProxyOptions{InstanceID: "p1", ScriptsDir: scripts}).WaitPolling(t)
	c, err := client.New(client.Config{Addresses: []string{a.URL()}, APIKey: a.APIKey, CAPEM: a.CAPEM})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err := c.Submit(t.Context(), a.Account, client.Command{Script: "exit.sh", Args: []string{"0"}})
	if err != nil {
		t.Fatal(err)
	}
	const unknown = "w_0123456789abcdef0123456789abcdef"
	const malformed = "not-an-id"
	for _, asJSON := range []bool{false, true} {
		var out, errb bytes.Buffer
		args := []string{"work", "wait", unknown, w.ID, malformed, "--server", a.URL(), "--api-key-file", a.APIKeyFile, "--ca", a.CAFile}
		if asJSON {
			args = append(args, "--json")
		}
		// The progress line, on a terminal (the text run), counts the
		// refused ids as done.
		isTerminal = func(io.Writer) bool { return !asJSON }
		t.Cleanup(func() { isTerminal = func(io.Writer) bool { return false } })
		code := Main(t.Context(), args, Env{Stdout: &out, Stderr: &errb})
		if code != ExitNotAllSucceeded {
			t.Errorf("json=%v: exit %d, want %d; stderr %q", asJSON, code, ExitNotAllSucceeded, errb.String())
		}
		progress, _, _ := strings.Cut(errb.String(), "automator: ")
		if !asJSON && !strings.Contains(progress, "\rwaiting for 3 units: 3 ended (1 succeeded, 2 refused), 0 open, ") {
			t.Errorf("progress on a terminal = %q, want the two refused ids counted as ended", progress)
		}
		msgs := strings.TrimPrefix(errb.String(), progress)
		lines := strings.Split(strings.TrimSpace(msgs), "\n")
		if len(lines) != 2 ||
			!strings.Contains(lines[0], "waiting for work "+unknown+": there is no such unit") ||
			!strings.Contains(lines[1], `waiting for work "`+malformed+`": not a work id`) {
			t.Errorf("json=%v: stderr = %q, want one line naming each refused id, in the order given", asJSON, errb.String())
		}
		if asJSON {
			// Every id, in the order given: a refused one is an object
			// with "refused" (why) and no "state", so a script tells it
			// from a unit.
			var got []map[string]any
			if err := json.Unmarshal(out.Bytes(), &got); err != nil || len(got) != 3 {
				t.Fatalf("--json = %q (%v), want the three ids", out.String(), err)
			}
			refused := func(v map[string]any, id, why string) bool {
				r, ok := v["refused"].(string)
				_, hasState := v["state"]
				return v["work_id"] == id && ok && strings.Contains(r, why) && !hasState
			}
			_, unitRefused := got[1]["refused"]
			if !refused(got[0], unknown, "no such unit") || got[1]["work_id"] != w.ID || got[1]["state"] != "succeeded" || unitRefused ||
				!refused(got[2], malformed, "not a work id") {
				t.Errorf("--json = %s, want the unknown id refused, the unit succeeded, the malformed id refused", out.String())
			}
			continue
		}
		rows := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(rows) != 2 || !strings.HasPrefix(rows[1], w.ID) || !strings.Contains(rows[1], "succeeded  0") {
			t.Errorf("table = %q, want the one known unit, succeeded with 0", out.String())
		}
	}
}

// signalWriter is a terminal's stderr that closes seen once what was
// written holds want.
type signalWriter struct {
	bytes.Buffer
	want string
	seen chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	n, err := w.Buffer.Write(p)
	if w.seen != nil && strings.Contains(w.Buffer.String(), w.want) {
		close(w.seen)
		w.seen = nil
	}
	return n, err
}

// TestWorkWaitReportsRefusedIDsBeforeAnErrorEndsIt: an id refused as
// unknown gets its line on stderr even when waiting for another unit then
// fails and ends the command (here work wait is interrupted; a lost
// connection ends it the same way), before that error's line, and the
// exit status is still the command's failure, 255.
func TestWorkWaitReportsRefusedIDsBeforeAnErrorEndsIt(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	c, err := client.New(client.Config{Addresses: []string{a.URL()}, APIKey: a.APIKey, CAPEM: a.CAPEM})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// No proxy polls: the unit stays queued, and its wait open.
	w, err := c.Submit(t.Context(), a.Account, client.Command{Script: "never.sh"})
	if err != nil {
		t.Fatal(err)
	}
	const unknown = "w_0123456789abcdef0123456789abcdef"
	isTerminal = func(io.Writer) bool { return true }
	t.Cleanup(func() { isTerminal = func(io.Writer) bool { return false } })
	stderr := &signalWriter{want: "1 refused", seen: make(chan struct{})}
	seen := stderr.seen
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		select {
		case <-seen: // the progress line counts the unknown id refused
			cancel()
		case <-ctx.Done():
		}
	}()
	var out bytes.Buffer
	code := Main(ctx, []string{"work", "wait", w.ID, unknown, "--json", "--server", a.URL(), "--api-key-file", a.APIKeyFile, "--ca", a.CAFile},
		Env{Stdout: &out, Stderr: stderr})
	msgs := stderr.String()
	refused := strings.Index(msgs, "automator: waiting for work "+unknown+": there is no such unit")
	failed := strings.Index(msgs, "automator: waiting for work "+w.ID)
	if code != ExitError || refused < 0 || failed < 0 || refused > failed {
		t.Errorf("exit %d, stderr %q; want %d, the line refusing %s, then the error that ended the command", code, msgs, ExitError, unknown)
	}
	// stdout lists what was known before the error: the refused id, not
	// the unit still open.
	var got []refusedJSON
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || len(got) != 1 || got[0].ID != unknown || !strings.Contains(got[0].Refused, "no such unit") {
		t.Errorf("stdout %q (%v), want the refused id alone", out.String(), err)
	}
}

// TestWorkWaitReportsEveryMalformedIDWhenAnErrorEndsIt: with more ids than
// work wait holds waits open at once (maxWaits), the malformed ids given
// after the ones that fill every slot each still get their line when an
// error then ends the command (here an interrupt once every slot holds a
// wait), in the order given and before that error's line, as work cancel
// reports them; an empty id and one with a control character are named
// quoted. The exit status is the command's failure, 255, and the --json
// array on stdout lists the malformed ids, not the units still open.
func TestWorkWaitReportsEveryMalformedIDWhenAnErrorEndsIt(t *testing.T) {
	t.Parallel()
	var waiting atomic.Int32
	full := make(chan struct{}) // every slot holds a wait
	a := automatortest.Start(t, automatortest.Options{Interceptors: []grpc.UnaryServerInterceptor{
		func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if _, ok := req.(*automatorv1.WaitRequest); ok && waiting.Add(1) == maxWaits {
				close(full)
			}
			return h(ctx, req)
		},
	}})
	c, err := client.New(client.Config{Addresses: []string{a.URL()}, APIKey: a.APIKey, CAPEM: a.CAPEM})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// No proxy polls: every unit stays queued, and its wait open.
	malformed := []string{"not-an-id", "w_0123456789ABCDEF0123456789abcdef", "", "w_\t0123"}
	ids := []string{malformed[0]}
	for range maxWaits + 8 {
		w, err := c.Submit(t.Context(), a.Account, client.Command{Script: "never.sh"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, w.ID)
	}
	ids = append(ids, malformed[1:]...)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		select {
		case <-full:
			cancel()
		case <-ctx.Done():
		}
	}()
	var out, errb bytes.Buffer
	args := append([]string{"work", "wait", "--json", "--server", a.URL(), "--api-key-file", a.APIKeyFile, "--ca", a.CAFile}, ids...)
	code := Main(ctx, args, Env{Stdout: &out, Stderr: &errb})
	lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n")
	var want []string
	for _, id := range malformed {
		want = append(want, fmt.Sprintf("automator: waiting for work %q: %s", id, notAWorkID))
	}
	if code != ExitError || len(lines) != len(malformed)+1 || !slices.Equal(lines[:len(malformed)], want) ||
		!strings.HasPrefix(lines[len(malformed)], "automator: waiting for work w_") || !strings.Contains(lines[len(malformed)], "context canceled") {
		t.Errorf("exit %d, stderr:\n%s\nwant %d, one line for each malformed id, in the order given:\n%s\nthen the error that ended the command",
			code, errb.String(), ExitError, strings.Join(want, "\n"))
	}
	var got []refusedJSON
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || len(got) != len(malformed) {
		t.Fatalf("stdout %q (%v), want the malformed ids alone", out.String(), err)
	}
	for i, id := range malformed {
		if got[i].ID != id || got[i].Refused != notAWorkID {
			t.Errorf("--json entry %d = %+v, want %q refused as %q", i, got[i], id, notAWorkID)
		}
	}
}

// TestWorkWaitListsTheUnitsThatEndedBeforeAnErrorEndsIt: when an error
// ends work wait (here an interrupt; a lost automator or a refused API key
// end it the same way), stdout still lists what it knows, as work cancel
// does: with --json the array, in the order given, of the units that ended
// and the ids refused before the error, the ids still open left out (so a
// script reading it gets JSON, not nothing); without it the table of the
// units that ended. The exit status is still the command's failure, 255.
func TestWorkWaitListsTheUnitsThatEndedBeforeAnErrorEndsIt(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	c, err := client.New(client.Config{Addresses: []string{a.URL()}, APIKey: a.APIKey, CAPEM: a.CAPEM})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// No proxy polls: open stays queued, and its wait open; ended is
	// cancelled before the wait.
	open, err := c.Submit(t.Context(), a.Account, client.Command{Script: "never.sh"})
	if err != nil {
		t.Fatal(err)
	}
	ended, err := c.Submit(t.Context(), a.Account, client.Command{Script: "never.sh"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(t.Context(), ended.ID); err != nil {
		t.Fatal(err)
	}
	const unknown = "w_0123456789abcdef0123456789abcdef"
	isTerminal = func(io.Writer) bool { return true }
	t.Cleanup(func() { isTerminal = func(io.Writer) bool { return false } })
	for _, asJSON := range []bool{true, false} {
		// Interrupted once the progress line counts the cancelled unit
		// and the refused id.
		stderr := &signalWriter{want: "(1 cancelled, 1 refused)", seen: make(chan struct{})}
		seen := stderr.seen
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			select {
			case <-seen:
				cancel()
			case <-ctx.Done():
			}
		}()
		args := []string{"work", "wait", open.ID, unknown, ended.ID, "--server", a.URL(), "--api-key-file", a.APIKeyFile, "--ca", a.CAFile}
		if asJSON {
			args = append(args, "--json")
		}
		var out bytes.Buffer
		code := Main(ctx, args, Env{Stdout: &out, Stderr: stderr})
		cancel()
		if code != ExitError || !strings.Contains(stderr.String(), "automator: waiting for work "+open.ID) {
			t.Errorf("json=%v: exit %d, stderr %q; want %d and the error that ended the command", asJSON, code, stderr.String(), ExitError)
		}
		if !asJSON {
			rows := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(rows) != 2 || !strings.HasPrefix(rows[0], "WORK ID") || !strings.HasPrefix(rows[1], ended.ID) || !strings.Contains(rows[1], "cancelled") {
				t.Errorf("table = %q, want the one unit that ended, cancelled", out.String())
			}
			continue
		}
		var got []map[string]any
		if err := json.Unmarshal(out.Bytes(), &got); err != nil || len(got) != 2 {
			t.Fatalf("--json = %q (%v), want the refused id and the unit that ended", out.String(), err)
		}
		r, _ := got[0]["refused"].(string)
		if got[0]["work_id"] != unknown || !strings.Contains(r, "no such unit") || got[1]["work_id"] != ended.ID || got[1]["state"] != "cancelled" {
			t.Errorf("--json = %s, want the unknown id refused, then %s cancelled, and not the open %s", out.String(), ended.ID, open.ID)
		}
	}
}
