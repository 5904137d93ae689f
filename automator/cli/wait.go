package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/mattn/go-isatty"

	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/internal/clihelp"
)

// isTerminal reports whether w is a terminal (progress lines are drawn
// there only); tests replace it.
var isTerminal = func(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// maxWaits bounds the waits open at once.
const maxWaits = 32

// ExitNotAllSucceeded is `work wait`'s exit code when a unit did not
// succeed with exit code 0, or an id was malformed or refused (unknown,
// say): the other ids are still waited for.
const ExitNotAllSucceeded = 1

// waitJSON is a unit in work wait's --json array.
type waitJSON struct {
	ID         string `json:"work_id"`
	Account    string `json:"account"`
	State      string `json:"state"`
	ExitCode   *int   `json:"exit_code,omitempty"`
	InstanceID string `json:"instance_id,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// unitsCommand parses the arguments of a command on units given by id
// (work wait, work cancel): the ids, --json, and the caller flags, by which
// it connects; explain is the caller flags' (callerFlags.explain), for the
// errors of the calls made with c.
func unitsCommand(name string, args []string, env Env) (ids []string, asJSON bool, c *client.Client, explain func(error) error, err error) {
	fs := newFlags(name, env)
	caller := addCallerFlags(fs)
	jsonFlag := fs.Bool("json", false, `print JSON (for scripts) instead of a table: an object per ID in the order given, a refused one {"work_id", "refused"} with no state`)
	if ids, err = clihelp.ParseInterspersed(fs, args); err != nil {
		return nil, false, nil, nil, err
	}
	if len(ids) == 0 {
		return nil, false, nil, nil, fmt.Errorf("usage: automator %s ID... (--data-dir DIR | --server URL --api-key-file F --ca FILE) [--json]", name)
	}
	if c, err = caller.connect(env.Stderr); err != nil {
		return nil, false, nil, nil, err
	}
	return ids, *jsonFlag, c, caller.explain, nil
}

// cmdWorkWait waits until every given unit has ended and prints how each
// ended. On a terminal, stderr shows a progress line meanwhile. An id that
// is malformed or refused (unknown, another account's for a scoped API key)
// gets one line on stderr (before the error, when the command then fails;
// a malformed id is refused before any wait, so it is reported even when
// the error comes while it waits for a slot), and a refusedJSON in its
// place with --json, as with work cancel (refusedIDs); the other ids are
// still waited for. It exits 0 when every
// unit succeeded with exit code 0, ExitNotAllSucceeded otherwise (a
// refused id included), and ExitError (through Main) when the command
// itself failed: its flags, or the automator unreachable or refusing the
// API key. Failed once it waits, it still prints, before the error, what
// it knows, as work cancel does: the units that ended by then, and with
// --json the refused ids too, in an array even when empty; the ids still
// open are left out.
func cmdWorkWait(ctx context.Context, args []string, env Env) (int, error) {
	ids, asJSON, c, explain, err := unitsCommand("work wait", args, env)
	if err != nil {
		return 0, err
	}
	defer c.Close()

	type ended struct {
		i   int
		w   client.Work
		err error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A malformed id is refused before any wait: it is reported whatever
	// becomes of the others, an error that ends the command included, even
	// when it would still be queued for one of the maxWaits slots then.
	refused := checkIDs("waiting for", ids)
	p := newProgress(env.Stderr, len(ids))
	results := make(chan ended)
	sem := make(chan struct{}, maxWaits)
	waits := 0
	for i, id := range ids {
		if refused[i] != nil {
			p.refused()
			continue
		}
		waits++
		go func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				results <- ended{i: i, err: fmt.Errorf("waiting for work %s: %w", id, ctx.Err())}
				return
			}
			defer func() { <-sem }()
			w, err := c.Wait(ctx, id)
			if ended, ok := client.UnreadableWork(err); ok {
				// Ended, with a result of an account deleted since (or
				// one altered in the database):
				// how it ended is known, not its exit code.
				w, err = ended, nil
			}
			if err != nil {
				err = refusal("waiting for", id, err)
			}
			results <- ended{i: i, w: w, err: err}
		}()
	}
	works := make([]client.Work, len(ids))
	got := make([]bool, len(ids)) // the unit ended, and works holds it
	var firstErr error
	for range waits {
		e := <-results
		switch {
		case refused.take(e.i, e.err):
			p.refused()
		case e.err != nil && firstErr == nil:
			firstErr = e.err // it names the unit
			cancel()         // the others end at once
		case e.err == nil:
			works[e.i], got[e.i] = e.w, true
			p.ended(e.w.State)
		}
	}
	p.finish()
	code := 0
	if refused.report(env.Stderr) {
		code = ExitNotAllSucceeded
	}

	units := make([]*waitJSON, len(ids)) // nil: refused, or still open when an error ended the command
	var out []waitJSON
	for i, w := range works {
		if !got[i] {
			continue
		}
		v := waitJSON{ID: w.ID, Account: w.Account, State: string(w.State), InstanceID: w.InstanceID, Reason: w.Reason}
		if w.State == client.StateSucceeded && w.Result != nil {
			v.ExitCode = &w.Result.ExitCode
		}
		if v.ExitCode == nil || *v.ExitCode != 0 {
			code = ExitNotAllSucceeded
		}
		units[i] = &v
		out = append(out, v)
	}
	if asJSON {
		// The units and the refused ids, in the order given; when an error
		// ended the command, those known by then (an array still, for a
		// script), then the error.
		err := writeJSON(env.Stdout, refused.listed(ids, func(i int) (any, bool) { return units[i], units[i] != nil }))
		if firstErr != nil {
			return 0, explain(firstErr)
		}
		return code, err
	}
	var werr error
	if len(out) > 0 {
		t := table(env.Stdout)
		fmt.Fprintln(t, "WORK ID\tACCOUNT\tSTATE\tEXIT\tCLAIMER\tREASON")
		var reasons reasonColumn
		for _, v := range out {
			exit := "-"
			if v.ExitCode != nil {
				exit = fmt.Sprint(*v.ExitCode)
			}
			fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\n", v.ID, v.Account, v.State, exit, orDash(v.InstanceID), reasons.cell(v.Reason, v.Account, v.InstanceID))
		}
		if werr = t.Flush(); werr == nil {
			werr = reasons.note(env.Stdout, "--json")
		}
	}
	if firstErr != nil {
		return 0, explain(firstErr) // after the units that ended before it
	}
	return code, werr
}

// progress draws one line on a terminal, redrawn in place as units end:
// "waiting for 10 units: 4 ended (3 succeeded, 1 failed), 6 open, 12s".
// Elsewhere (a pipe, a file, a log) it draws nothing.
type progress struct {
	w        io.Writer
	on       bool
	total    int
	done     int
	byState  map[client.State]int
	nRefused int // ids refused: malformed, unknown
	start    time.Time
	width    int // of the line drawn last, to blank it out
}

func newProgress(w io.Writer, total int) *progress {
	p := &progress{w: w, on: isTerminal(w), total: total, byState: map[client.State]int{}, start: time.Now()}
	p.draw()
	return p
}

func (p *progress) ended(s client.State) {
	p.done++
	p.byState[s]++
	p.draw()
}

// refused counts an id refused (malformed, unknown) as done.
func (p *progress) refused() {
	p.done++
	p.nRefused++
	p.draw()
}

func (p *progress) draw() {
	if !p.on {
		return
	}
	var parts []string
	for _, s := range []client.State{client.StateSucceeded, client.StateFailed, client.StateTimedOut, client.StateCancelled} {
		if n := p.byState[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, s))
		}
	}
	if p.nRefused > 0 {
		parts = append(parts, fmt.Sprintf("%d refused", p.nRefused))
	}
	line := fmt.Sprintf("waiting for %d units: %d ended", p.total, p.done)
	if len(parts) > 0 {
		line += " (" + strings.Join(parts, ", ") + ")"
	}
	line += fmt.Sprintf(", %d open, %s", p.total-p.done, time.Since(p.start).Round(time.Second))
	pad := max(p.width-len(line), 0)
	fmt.Fprintf(p.w, "\r%s%s", line, strings.Repeat(" ", pad))
	p.width = len(line)
}

// finish ends the progress line, so what follows starts on a line of its
// own.
func (p *progress) finish() {
	if p.on {
		fmt.Fprintln(p.w)
	}
}
