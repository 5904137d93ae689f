package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// accountRow is one account with its status.
type accountRow struct {
	store.AccountStats
	Status server.AccountStatus
}

func (a accountRow) Stranded() bool { return a.Status == server.StatusStranded }

type accountsData struct {
	Accounts []accountRow
	Stranded []accountRow
}

func (d *Dashboard) accountRows(ctx context.Context) ([]accountRow, error) {
	stats, err := d.o.Store.AccountStats(ctx, store.AccountStatsParams{OnlineSince: d.onlineSince(d.o.Now())})
	if err != nil {
		return nil, err
	}
	rows := make([]accountRow, len(stats))
	for i, a := range stats {
		rows[i] = accountRow{AccountStats: a, Status: server.StatusOf(a)}
	}
	return rows, nil
}

// accounts: every account's queue and instances, stranded ones first in a
// warning.
func (d *Dashboard) accounts(r *http.Request, _ *session) (string, any, error) {
	rows, err := d.accountRows(r.Context())
	if err != nil {
		return "", nil, err
	}
	data := accountsData{Accounts: rows}
	for _, a := range rows {
		if a.Stranded() {
			data.Stranded = append(data.Stranded, a)
		}
	}
	return "Accounts", data, nil
}

type instanceRow struct {
	store.Instance
	Online bool
}

type instancesData struct {
	Account   accountRow
	Instances []instanceRow
}

// instances: the instances of one account.
func (d *Dashboard) instances(r *http.Request, _ *session) (string, any, error) {
	name := r.PathValue("account")
	rows, err := d.accountRows(r.Context())
	if err != nil {
		return "", nil, err
	}
	data := instancesData{}
	found := false
	for _, a := range rows {
		if a.Account == name {
			data.Account, found = a, true
		}
	}
	if !found {
		return "", nil, errNotFound(fmt.Sprintf("There is no account %q.", name))
	}
	list, err := d.o.Store.InstanceList(r.Context(), name)
	if err != nil {
		return "", nil, err
	}
	since := d.onlineSince(d.o.Now())
	for _, in := range list {
		data.Instances = append(data.Instances, instanceRow{Instance: in, Online: !in.LastPollAt.Before(since)})
	}
	return "Account " + name, data, nil
}

// workRow is a unit as listed: its timeline, claimer, outcome and exit
// code, and its script name for keys that may see it.
type workRow struct {
	store.Work
	// ExitCode is set for a unit that ran (succeeded) and whose result
	// opened.
	ExitCode *int32
	// Outcome says how it ended, in words; empty while it runs.
	Outcome string
	// Script is the script name, set only for keys that may see it.
	Script string
}

// ClaimWait is the time from queueing to the claim (0 if unclaimed).
func (w workRow) ClaimWait() time.Duration {
	if w.ClaimedAt.IsZero() {
		return 0
	}
	return w.ClaimedAt.Sub(w.QueuedAt)
}

// RunTime is the time from the claim (or queueing) to the end.
func (w workRow) RunTime() time.Duration {
	if w.FinishedAt.IsZero() {
		return 0
	}
	if w.ClaimedAt.IsZero() {
		return w.FinishedAt.Sub(w.QueuedAt)
	}
	return w.FinishedAt.Sub(w.ClaimedAt)
}

// row opens what a listing shows of unit w: the exit code for everyone,
// the script name only when reveal.
func (d *Dashboard) row(ctx context.Context, w store.Work, reveal bool) (workRow, *automatorv1.Command, *automatorv1.Result) {
	row := workRow{Work: w, Outcome: w.Reason}
	// A unit of a deleted account opens no more: nothing to warn of.
	_, deleted := store.DeletedAccount(w.Account)
	var res *automatorv1.Result
	var err error
	if !deleted {
		if res, err = d.o.Opener.OpenResult(ctx, w); err != nil {
			d.log.Warn("dashboard: opening a result", "work_id", w.ID, "err", err)
		}
	}
	if res != nil {
		if w.State == store.StateSucceeded {
			code := res.GetExitCode()
			row.ExitCode = &code
		}
		if w.State == store.StateFailed && res.GetFailure() != "" {
			row.Outcome = res.GetFailure()
		}
	}
	if w.State == store.StateSucceeded && row.Outcome == "" {
		row.Outcome = "ran to the end"
	}
	// The proxy's reason for a failure names the script (unknown script,
	// cannot start it): it is shown only where the script name is.
	if w.State == store.StateFailed && !reveal {
		row.Outcome = hiddenFailure
	}
	var cmd *automatorv1.Command
	if reveal && deleted {
		row.Script = "(unreadable: its account was deleted)"
	} else if reveal {
		if cmd, err = d.o.Opener.OpenCommand(ctx, w); err != nil {
			d.log.Warn("dashboard: opening a command", "work_id", w.ID, "err", err)
		}
		row.Script = cmd.GetScript()
	}
	return row, cmd, res
}

// hiddenFailure is the outcome of a failed unit for keys that may not see
// its command.
const hiddenFailure = "the proxy could not run the command (reason hidden)"

var states = []store.State{store.StateQueued, store.StateClaimed, store.StateSucceeded,
	store.StateFailed, store.StateTimedOut, store.StateCancelled}

type workData struct {
	Account  string
	State    store.State
	Accounts []string
	States   []store.State
	Rows     []workRow
	// Next is the URL of the next (older) page; empty on the last.
	Next string
	// Reveal: the key may see script names.
	Reveal bool
}

// workList: units newest first, by account and state.
func (d *Dashboard) workList(r *http.Request, s *session) (string, any, error) {
	q := r.URL.Query()
	data := workData{Account: q.Get("account"), State: store.State(q.Get("state")), States: states, Reveal: s.Reveal}
	if data.Account != "" && !server.AccountNamePattern.MatchString(data.Account) {
		return "", nil, errBadRequest(fmt.Sprintf("%q is not an account name.", data.Account))
	}
	if data.State != "" && !data.State.Valid() {
		return "", nil, errBadRequest(fmt.Sprintf("%q is not a state; the states are queued, claimed, succeeded, failed, timed_out and cancelled.", data.State))
	}
	p := store.WorkListParams{Account: data.Account, State: data.State, Limit: d.o.PageSize}
	if b := q.Get("before"); b != "" {
		at, id, ok := parseCursor(b)
		if !ok {
			return "", nil, errBadRequest("The page position (before=) is not valid; start from the first page.")
		}
		p.BeforeQueuedAt, p.BeforeID = at, id
	}
	ctx := r.Context()
	accounts, err := d.accountRows(ctx)
	if err != nil {
		return "", nil, err
	}
	for _, a := range accounts {
		data.Accounts = append(data.Accounts, a.Account)
	}
	list, err := d.o.Store.WorkList(ctx, p)
	if err != nil {
		return "", nil, err
	}
	for _, w := range list {
		row, _, _ := d.row(ctx, w, s.Reveal)
		data.Rows = append(data.Rows, row)
	}
	if len(list) == p.Limit {
		last := list[len(list)-1]
		next := url.Values{}
		if data.Account != "" {
			next.Set("account", data.Account)
		}
		if data.State != "" {
			next.Set("state", string(data.State))
		}
		next.Set("before", fmt.Sprintf("%d.%s", last.QueuedAt.UnixNano(), last.ID))
		data.Next = Prefix + "work?" + next.Encode()
	}
	return "Work", data, nil
}

func parseCursor(s string) (time.Time, string, bool) {
	n, id, ok := strings.Cut(s, ".")
	if !ok || id == "" {
		return time.Time{}, "", false
	}
	nanos, err := strconv.ParseInt(n, 10, 64)
	if err != nil || nanos <= 0 {
		return time.Time{}, "", false
	}
	return time.Unix(0, nanos).UTC(), id, true
}

type unitData struct {
	workRow
	Reveal bool
	// RevealKeys are the keys that may see commands and output (to tell
	// others whom to ask).
	RevealKeys []string
	// Set only when Reveal.
	Command *automatorv1.Command
	Result  *automatorv1.Result
}

// unit: one unit's timeline, outcome and, for keys that may see them, its
// command and output.
func (d *Dashboard) unit(r *http.Request, s *session) (string, any, error) {
	id := r.PathValue("id")
	w, err := d.o.Store.WorkGet(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil, errNotFound(fmt.Sprintf("There is no unit of work %q.", id))
	}
	if err != nil {
		return "", nil, err
	}
	row, cmd, res := d.row(r.Context(), w, s.Reveal)
	data := unitData{workRow: row, Reveal: s.Reveal, RevealKeys: d.revealKeys()}
	if s.Reveal {
		data.Command, data.Result = cmd, res
	}
	return "Work " + id, data, nil
}
