package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/clihelp"
	"github.com/opsgate/opsgate/internal/printable"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// cmdWork dispatches the work subcommands.
func cmdWork(ctx context.Context, args []string, env Env) (int, error) {
	if len(args) == 0 {
		return 0, errors.New("usage: automator work list|show|wait|cancel ...; run `automator help`")
	}
	switch args[0] {
	case "list":
		return 0, cmdWorkList(ctx, args[1:], env)
	case "show":
		return 0, cmdWorkShow(ctx, args[1:], env)
	case "wait":
		return cmdWorkWait(ctx, args[1:], env)
	case "cancel":
		return cmdWorkCancel(ctx, args[1:], env)
	}
	return 0, fmt.Errorf("unknown work command %q; run `automator help`", args[0])
}

// opener opens sealed commands and results with the account keys, as the
// automator does: the listings need the master key of the data directory.
func opener(dir string, st store.Store) (*server.Server, error) {
	master, err := readMaster(dir)
	if err != nil {
		return nil, err
	}
	return server.New(server.Options{Store: st, MasterKey: master, Logger: slog.New(slog.DiscardHandler)})
}

// workView is a unit as listed: its timeline, claimer and outcome. The
// exit code comes from the sealed result; the command and output only
// with --reveal.
type workView struct {
	ID         string    `json:"work_id"`
	Account    string    `json:"account"`
	State      string    `json:"state"`
	QueuedAt   time.Time `json:"queued_at"`
	ClaimedAt  time.Time `json:"claimed_at,omitzero"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	Deadline   time.Time `json:"deadline"`
	InstanceID string    `json:"instance_id,omitempty"`
	ExitCode   *int32    `json:"exit_code,omitempty"`
	Reason     string    `json:"reason,omitempty"`
	// Problem says what of the unit's sealed blobs does not open (altered
	// in the database?): the unit is listed all the same.
	Problem string       `json:"problem,omitempty"`
	Command *commandView `json:"command,omitempty"`
	// CommandLost: the unit was kept by `automator repair --salvage`, its
	// row, with its command, lost.
	CommandLost bool        `json:"command_lost,omitempty"`
	Output      *outputView `json:"output,omitempty"`
	// viaAPI: read through the API (work show --server), which gives no
	// command.
	viaAPI bool
}

type commandView struct {
	Script string   `json:"script"`
	Args   []string `json:"args"`
}

// outputView is a unit's output. In JSON each stream is given as text
// when it is UTF-8 (null when not: JSON would replace each byte that is
// not with U+FFFD, for good; a stream cut at the output limit within a
// character, as text up to that character), and always byte for byte in
// base64, as the API gives it.
type outputView struct {
	Stdout          *string `json:"stdout"`
	Stderr          *string `json:"stderr"`
	StdoutBase64    []byte  `json:"stdout_base64"`
	StderrBase64    []byte  `json:"stderr_base64"`
	StdoutTruncated bool    `json:"stdout_truncated,omitempty"`
	StderrTruncated bool    `json:"stderr_truncated,omitempty"`
}

// newOutputView is the view of stdout and stderr.
func newOutputView(stdout, stderr []byte, stdoutTruncated, stderrTruncated bool) *outputView {
	text := func(b []byte, truncated bool) *string {
		if truncated {
			// Cut at the proxy's output limit, which may fall within a
			// character: the text is what comes before it.
			for k := 1; k <= utf8.UTFMax-1 && k <= len(b); k++ {
				if utf8.RuneStart(b[len(b)-k]) {
					if !utf8.FullRune(b[len(b)-k:]) {
						b = b[:len(b)-k]
					}
					break
				}
			}
		}
		if !utf8.Valid(b) {
			return nil
		}
		s := string(b)
		return &s
	}
	// Never nil: JSON gives an empty stream as "", not null.
	exact := func(b []byte) []byte { return append([]byte{}, b...) }
	return &outputView{Stdout: text(stdout, stdoutTruncated), Stderr: text(stderr, stderrTruncated), StdoutBase64: exact(stdout), StderrBase64: exact(stderr),
		StdoutTruncated: stdoutTruncated, StderrTruncated: stderrTruncated}
}

func viewOf(ctx context.Context, srv *server.Server, w store.Work, reveal bool) (workView, error) {
	v := workView{ID: w.ID, Account: w.Account, State: string(w.State), QueuedAt: w.QueuedAt, ClaimedAt: w.ClaimedAt,
		FinishedAt: w.FinishedAt, Deadline: w.Deadline, InstanceID: w.InstanceID, Reason: w.Reason}
	if _, deleted := store.DeletedAccount(w.Account); deleted {
		// Its key is gone: it is listed without what its result held,
		// and cannot be revealed.
		if reveal {
			return v, fmt.Errorf("cannot reveal work %s: %w", w.ID, server.DeletedAccountError(w.Account))
		}
		return v, nil
	}
	res, err := srv.OpenResult(ctx, w)
	if err != nil {
		// One unit's blob that does not open fails neither a listing nor
		// the rest of what is shown of it.
		v.Problem = fmt.Sprintf("its stored result does not open (altered in the database?): %v", err)
		if errors.Is(err, server.ErrResultContradicted) {
			v.Problem = err.Error()
		}
	}
	if res != nil && w.State == store.StateSucceeded {
		code := res.GetExitCode()
		v.ExitCode = &code
	}
	if res != nil && w.State == store.StateFailed && res.GetFailure() != "" {
		v.Reason = res.GetFailure()
	}
	if !reveal {
		return v, nil
	}
	cmd, err := srv.OpenCommand(ctx, w)
	if errors.Is(err, server.ErrCommandLost) {
		v.CommandLost = true // its reason says so
		return v, nil
	}
	if err != nil {
		if v.Problem != "" {
			v.Problem += "; "
		}
		v.Problem += fmt.Sprintf("its stored command does not open (altered in the database?): %v", err)
		return v, nil
	}
	v.Command = &commandView{Script: cmd.GetScript(), Args: append([]string{}, cmd.GetArgs()...)}
	if res != nil {
		v.Output = newOutputView(res.GetStdout(), res.GetStderr(), res.GetStdoutTruncated(), res.GetStderrTruncated())
	}
	return v, nil
}

// after renders the time from one step of the timeline to the next: "-"
// when the step has not happened.
func after(from, to time.Time) string {
	if to.IsZero() {
		return "-"
	}
	return "+" + to.Sub(from).Round(time.Millisecond).String()
}

func exitCode(c *int32) string {
	if c == nil {
		return "-"
	}
	return fmt.Sprint(*c)
}

// cmdWorkList lists units newest first; --account and --state narrow it,
// and given empty they are refused rather than taken for no filter.
func cmdWorkList(ctx context.Context, args []string, env Env) error {
	fs := newFlags("work list", env)
	l := listingFlags(fs)
	account := fs.String("account", "", "only this account's units")
	state := fs.String("state", "", "only units in this state: queued, claimed, succeeded, failed, timed_out or cancelled")
	limit := fs.Int("limit", 50, "list at most this many units (the newest)")
	if err := clihelp.ParseNoArgs(fs, args); err != nil {
		return err
	}
	var empty error
	fs.Visit(func(f *flag.Flag) {
		// Given, and empty (a script's variable left empty): not taken
		// for no filter, which would list every unit.
		if (f.Name == "account" || f.Name == "state") && f.Value.String() == "" && empty == nil {
			empty = fmt.Errorf("--%s is empty; leave it out to list units of every %s", f.Name, f.Name)
		}
	})
	if empty != nil {
		return empty
	}
	if *state != "" && !store.State(*state).Valid() {
		return fmt.Errorf("--state %q is not a state; use queued, claimed, succeeded, failed, timed_out or cancelled", *state)
	}
	if *limit < 1 || *limit > 10000 {
		return fmt.Errorf("--limit %d is outside [1, 10000]", *limit)
	}
	st, _, err := l.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	if *account != "" {
		if err := workListAccount(ctx, st, *account, l); err != nil {
			return err
		}
	}
	srv, err := opener(*l.dir, st)
	if err != nil {
		return err
	}
	// One more than asked tells whether the listing leaves units out.
	views, err := workViews(ctx, st, srv, store.WorkListParams{Account: *account, State: store.State(*state)}, *limit+1)
	if err != nil {
		return err
	}
	more := len(views) > *limit
	views = views[:min(len(views), *limit)]
	cut := fmt.Sprintf("the newest %d listed; older ones match too: --limit N lists up to N (10000 at most)", *limit)
	if *l.json {
		if more {
			// On stderr: stdout is the JSON array alone.
			fmt.Fprintln(env.Stderr, "automator: work list: "+cut)
		}
		return writeJSON(env.Stdout, views)
	}
	if len(views) == 0 {
		_, err := fmt.Fprintln(env.Stdout, "no unit of work matches")
		return err
	}
	w := table(env.Stdout)
	fmt.Fprintln(w, "WORK ID\tACCOUNT\tSTATE\tQUEUED\tCLAIMED\tFINISHED\tCLAIMER\tEXIT\tREASON")
	var reasons reasonColumn
	for _, v := range views {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.ID, v.Account, v.State, utc(v.QueuedAt),
			after(v.QueuedAt, v.ClaimedAt), after(firstOf(v.ClaimedAt, v.QueuedAt), v.FinishedAt), orDash(v.InstanceID),
			exitCode(v.ExitCode), reasons.cell(cmp.Or(v.Problem, v.Reason), v.Account, v.InstanceID))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := reasons.note(env.Stdout, "`automator work show ID` (or --json)"); err != nil {
		return err
	}
	if more {
		// Silently cut, a listing reads as every unit there is.
		_, err := fmt.Fprintln(env.Stdout, cut)
		return err
	}
	return nil
}

// workListChunk is the most units work list reads at a time. Each comes
// with its sealed command and result, the result read for its exit code,
// and a result may weigh megabytes: read all at once, 10,000 units of 64
// KiB of output took 1.4 GB.
const workListChunk = 100

// workLister is what workViews reads.
type workLister interface {
	WorkList(ctx context.Context, p store.WorkListParams) ([]store.Work, error)
}

// workViews lists the views of up to limit units as p selects them (its
// Limit aside), newest first, reading workListChunk units at a time and
// keeping only their views. Each read goes on from the last unit of the
// one before, by queue time and id, so no unit is listed twice.
func workViews(ctx context.Context, st workLister, srv *server.Server, p store.WorkListParams, limit int) ([]workView, error) {
	views := []workView{} // [] in JSON when none matches
	for len(views) < limit {
		p.Limit = min(workListChunk, limit-len(views))
		list, err := st.WorkList(ctx, p)
		if err != nil {
			return nil, err
		}
		for _, w := range list {
			v, err := viewOf(ctx, srv, w, false)
			if err != nil {
				return nil, err
			}
			views = append(views, v)
		}
		if len(list) < p.Limit {
			break
		}
		last := list[len(list)-1]
		p.BeforeQueuedAt, p.BeforeID = last.QueuedAt, last.ID
	}
	return views, nil
}

// workListAccount refuses an --account of work list that names no
// account. A deleted account's units are listed under its tombstone,
// "NAME (deleted TIME)", which --account takes as the listing shows it;
// the name of a deleted account, not made again, is refused with the
// name its units are listed under.
func workListAccount(ctx context.Context, st store.Store, account string, l listing) error {
	if _, err := st.AccountGet(ctx, account); !errors.Is(err, store.ErrNotFound) {
		return err // the account (nil), or a failed read
	}
	ds, err := st.AccountDeletions(ctx, time.Time{})
	if err != nil {
		return err
	}
	var last string
	for _, d := range ds {
		if d.Tombstone == account {
			return nil
		}
		if d.Name == account {
			last = d.Tombstone // listed oldest first: the last is the latest
		}
	}
	if last != "" {
		return fmt.Errorf("--account: there is no account %q; it was deleted, and its units are listed as --account %q", account, last)
	}
	return fmt.Errorf("--account: there is no account %q; %s", account, l.accountListHint())
}

// orDash stands "-" for an empty cell, so no line of a table ends in
// blanks.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// firstOf returns a unless it is zero, else b.
func firstOf(a, b time.Time) time.Time {
	if a.IsZero() {
		return b
	}
	return a
}

// cmdWorkShow prints one unit: its timeline, outcome and, with --reveal,
// its command and output. An id that names no unit is refused in one line
// saying whether it is malformed (not the shape of a work id) or unknown.
func cmdWorkShow(ctx context.Context, args []string, env Env) error {
	fs := newFlags("work show", env)
	l := listingFlags(fs)
	caller := callerFlags{dir: l.dir,
		server:     fs.String("server", "", "automator URL https://HOST:PORT (away from its host: the unit is read through the API, which gives its output but not its command); several, comma-separated, fail over"),
		apiKeyFile: fs.String("api-key-file", "", "file holding the API key (with --server)"),
		caFile:     fs.String("ca", "", "the automator's CA certificate (with --server)"),
	}
	reveal := fs.Bool("reveal", false, "also open and print the script name, arguments and output (sealed in the store; with --server, the output)")
	pos, err := clihelp.ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if _, err := oneArg(fs, "ID", pos, "usage: automator work show ID (--data-dir DIR | --server URL --api-key-file F --ca FILE) [--reveal] [--json]"); err != nil {
		return err
	}
	var v workView
	if *caller.server != "" {
		if *l.db != "" {
			return errors.New("--db is for --data-dir, on the automator's host: with --server the automator reads its own database")
		}
		if v, err = remoteView(ctx, pos[0], caller, *reveal, env); err != nil {
			return err
		}
	} else if v, err = localView(ctx, pos[0], l, *reveal); err != nil {
		return err
	}
	if *l.json {
		return writeJSON(env.Stdout, v)
	}
	t := table(env.Stdout)
	line := func(k, v string) { fmt.Fprintf(t, "%s\t%s\n", k, v) }
	line("work", v.ID)
	line("account", v.Account)
	line("state", v.State)
	line("queued", utc(v.QueuedAt))
	claimed := "-"
	if !v.ClaimedAt.IsZero() {
		claimed = fmt.Sprintf("%s (%s) by %s", utc(v.ClaimedAt), after(v.QueuedAt, v.ClaimedAt), v.InstanceID)
	}
	line("claimed", claimed)
	finished := "-"
	if !v.FinishedAt.IsZero() {
		finished = fmt.Sprintf("%s (%s)", utc(v.FinishedAt), after(firstOf(v.ClaimedAt, v.QueuedAt), v.FinishedAt))
	}
	line("finished", finished)
	line("deadline", utc(v.Deadline))
	line("exit code", exitCode(v.ExitCode))
	line("reason", orDash(v.Reason))
	if v.Problem != "" {
		line("problem", v.Problem)
	}
	if v.CommandLost {
		line("command", "(lost with its row)")
		return t.Flush()
	}
	switch {
	case v.viaAPI && !*reveal:
		line("command", "(not given by the API; --reveal gives the output)")
		return t.Flush()
	case v.viaAPI:
		line("command", "(not given by the API: `work show --data-dir` on the automator's host opens it)")
	case v.Command == nil:
		line("command", "(sealed; --reveal opens the script name, arguments and output)")
		return t.Flush()
	default:
		line("script", printable.Shown(v.Command.Script))
		for i, a := range v.Command.Args {
			line(fmt.Sprintf("arg %d", i+1), fmt.Sprintf("%q", a))
		}
	}
	if err := t.Flush(); err != nil {
		return err
	}
	if v.Output != nil {
		out, outNote := forTerminal(v.Output.StdoutBase64, isTerminal(env.Stdout))
		errs, errNote := forTerminal(v.Output.StderrBase64, isTerminal(env.Stdout))
		fmt.Fprintf(env.Stdout, "---- stdout%s%s ----\n%s", truncNote(v.Output.StdoutTruncated), outNote, ensureNL(out))
		fmt.Fprintf(env.Stdout, "---- stderr%s%s ----\n%s", truncNote(v.Output.StderrTruncated), errNote, ensureNL(errs))
	}
	return nil
}

// forTerminal is a script's output b as work show writes it: as it is,
// unless onTerminal, where a control character other than a newline or a
// tab, a character that does not print as itself (printable: a bidi
// override, a zero-width space) and a byte that is not UTF-8 is written
// escaped (\x1b, \u202e), so that what a script printed cannot clear the
// operator's screen, set its title, type into it or pass for other text
// (reviews); note then says so.
func forTerminal(b []byte, onTerminal bool) (s, note string) {
	if !onTerminal {
		return string(b), ""
	}
	var out strings.Builder
	escaped := false
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&out, "\\x%02x", b[0])
			escaped = true
		case r == '\n' || r == '\t':
			out.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&out, "\\x%02x", r)
			escaped = true
		case r != ' ' && !unicode.Is(unicode.Variation_Selector, r) && printable.FirstNotShown(string(b[:n])) == 0:
			// C1 controls, and what does not print as itself (a bidi
			// override that reverses what follows, a zero-width space:
			// the rule of instance ids and script names; a re-review),
			// but an emoji's variation selector.
			fmt.Fprintf(&out, "\\u%04x", r)
			escaped = true
		default:
			out.Write(b[:n])
		}
		b = b[n:]
	}
	if escaped {
		note = " (control characters escaped on a terminal: piped, or with --json, it is given byte for byte)"
	}
	return out.String(), note
}

// localView is the view of unit id read from the store of the data
// directory l names (the automator's host), revealed when reveal.
func localView(ctx context.Context, id string, l listing, reveal bool) (workView, error) {
	st, _, err := l.open(ctx)
	if err != nil {
		return workView{}, err
	}
	defer st.Close()
	srv, err := opener(*l.dir, st)
	if err != nil {
		return workView{}, err
	}
	w, err := st.WorkGet(ctx, id)
	if errors.Is(err, store.ErrNotFound) && !store.ValidWorkID(id) {
		// Worded as work wait and work cancel word it. Looked up first:
		// the store takes any id, and what it holds is shown.
		return workView{}, refuse("showing", id, notAWorkID)
	}
	if errors.Is(err, store.ErrNotFound) {
		return workView{}, fmt.Errorf("there is no unit of work %q", id)
	}
	if err != nil {
		return workView{}, err
	}
	return viewOf(ctx, srv, w, reveal)
}

// remoteView is the view of unit id read through the API (Get) from the
// automator caller names, with its output when reveal: what a caller away
// from the automator's host can learn of a unit exec left (its command is
// not given back by the API).
func remoteView(ctx context.Context, id string, caller callerFlags, reveal bool, env Env) (workView, error) {
	if !store.ValidWorkID(id) {
		return workView{}, refuse("showing", id, notAWorkID)
	}
	c, err := caller.connect(env.Stderr)
	if err != nil {
		return workView{}, err
	}
	defer c.Close()
	w, err := c.Get(ctx, id)
	if ended, ok := client.UnreadableWork(err); ok {
		// Its account deleted since (or its result altered in the
		// database): how it ended is known, not what it gave.
		if reveal {
			return workView{}, caller.explain(err)
		}
		w, err = ended, nil
	}
	if status.Code(err) == codes.NotFound {
		return workView{}, fmt.Errorf("there is no unit of work %q that this API key may see", id)
	}
	if err != nil {
		return workView{}, caller.explain(err)
	}
	v := workView{ID: w.ID, Account: w.Account, State: string(w.State), QueuedAt: w.QueuedAt, ClaimedAt: w.ClaimedAt,
		FinishedAt: w.FinishedAt, Deadline: w.Deadline, InstanceID: w.InstanceID, Reason: w.Reason, viaAPI: true}
	if r := w.Result; r != nil {
		if w.State == client.StateSucceeded {
			code := int32(r.ExitCode)
			v.ExitCode = &code
		}
		if reveal {
			v.Output = newOutputView(r.Stdout, r.Stderr, r.StdoutTruncated, r.StderrTruncated)
		}
	}
	return v, nil
}

func truncNote(t bool) string {
	if t {
		return " (truncated)"
	}
	return ""
}

func ensureNL(s string) string {
	if s == "" || s[len(s)-1] == '\n' {
		return s
	}
	return s + "\n"
}
