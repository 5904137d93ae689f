package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/printable"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// accountRow is one account with its status.
type accountRow struct {
	store.AccountStats
	Status server.AccountStatus
}

func (a accountRow) Stranded() bool { return a.Status == server.StatusStranded }

// Refused: nothing queued, no instance online, and instances refused for
// want of a usable key (server.StatusRefused).
func (a accountRow) Refused() bool { return a.Status == server.StatusRefused }

type accountsData struct {
	// Accounts are the rows of this page of the table: AccountsPageSize
	// accounts by name, after After.
	Accounts []accountRow
	// After is the name the page starts after ("" on the first page);
	// First and Last are the numbers (from 1) of its first and last rows,
	// Total the accounts' number.
	After              string
	First, Last, Total int
	// Next is the URL of the next page; empty on the last.
	Next string

	Stranded []accountRow
	// Refused are the accounts whose only live instances are refused
	// (warned of after the stranded ones: nothing of theirs times out yet).
	Refused []accountRow
	// Deleting are the accounts being deleted (store.AccountsBeingDeleted:
	// units left to move under their tombstones, their names taken
	// meanwhile), as `automator account list` shows them after its table.
	Deleting []store.AccountDeletion
}

// accountRows returns the accounts' rows: every account's, or account's
// alone when it is not "" (none when it is no account).
func (d *Dashboard) accountRows(ctx context.Context, account string) ([]accountRow, error) {
	stats, err := d.o.Store.AccountStats(ctx, store.AccountStatsParams{OnlineSince: d.onlineSince(d.o.Now()), Account: account})
	if err != nil {
		return nil, err
	}
	rows := make([]accountRow, len(stats))
	for i, a := range stats {
		rows[i] = accountRow{AccountStats: a, Status: server.StatusOf(a)}
	}
	return rows, nil
}

// accounts: every account's queue and instances, a page of them at a
// time (?after=NAME: those after NAME by name), the stranded ones first in
// a warning, then those whose only live instances are refused in another,
// both naming every account they concern whatever the page, and after the
// table the accounts being deleted.
func (d *Dashboard) accounts(r *http.Request, _ *session) (string, any, error) {
	after := r.URL.Query().Get("after")
	if after != "" && !server.AccountNamePattern.MatchString(after) {
		return "", nil, errBadRequest(fmt.Sprintf("%s is not an account name; start from the first page.", printable.Quote(after)))
	}
	rows, err := d.accountRows(r.Context(), "")
	if err != nil {
		return "", nil, err
	}
	deleting, err := d.o.Store.AccountsBeingDeleted(r.Context())
	if err != nil {
		return "", nil, err
	}
	data := accountsData{Deleting: deleting, After: after, Total: len(rows)}
	for _, a := range rows {
		if a.Stranded() {
			data.Stranded = append(data.Stranded, a)
		}
		if a.Refused() {
			data.Refused = append(data.Refused, a)
		}
	}
	// The rows are by name, byte by byte (AccountStats): the page starts
	// at the first after After.
	start := sort.Search(len(rows), func(i int) bool { return rows[i].Account > after })
	end := min(start+d.o.AccountsPageSize, len(rows))
	data.Accounts, data.First, data.Last = rows[start:end], start+1, end
	if end < len(rows) {
		data.Next = Prefix + "?" + url.Values{"after": {rows[end-1].Account}}.Encode()
	}
	return "Accounts", data, nil
}

type instanceRow struct {
	store.Instance
	// Status is online, stopped (its last poll said it was stopping),
	// refused (it polls, and is refused for want of a usable key, for a
	// key that is not the account's or for an expired account token) or
	// offline, as `automator instances` says.
	Status server.InstanceStatus
}

type instancesData struct {
	Account accountRow
	// Instances are the rows of this page of the table: InstancesPageSize
	// instances by id, after After, of those of status Status (of every
	// status when it is "").
	Instances []instanceRow
	Status    server.InstanceStatus
	// After is the instance id the page starts after ("" on the first
	// page); First and Last are the numbers (from 1) of its first and last
	// rows, Total the number of instances of status Status.
	After              string
	First, Last, Total int
	// Next is the URL of the next page; empty on the last.
	Next string
	// ByStatus counts the account's instances of each status, in the
	// order statuses are listed (instanceStatuses), all of them.
	ByStatus []statusCount
	All      int
}

type statusCount struct {
	Status server.InstanceStatus
	N      int
}

// instanceStatuses are the statuses an instance is listed with, in the
// order the page counts them.
var instanceStatuses = []server.InstanceStatus{server.InstanceOnline, server.InstanceRefused, server.InstanceStopped, server.InstanceOffline}

// instances: the instances of one account, a page of them at a time
// (?after=ID: those after ID by id), of one status (?status=) or of any.
// An account's token holder may record thousands of instance ids (up to
// limits.max_instances_per_account), each a row: the whole list made
// pages of megabytes, rendered again at every refresh of a live page (a
// review: 6.3 MB and 2.7 s at 20,000).
func (d *Dashboard) instances(r *http.Request, _ *session) (string, any, error) {
	name := r.PathValue("account")
	q := r.URL.Query()
	after, status := q.Get("after"), server.InstanceStatus(q.Get("status"))
	if after != "" && (!utf8.ValidString(after) || printable.FirstNotShown(after) >= 0) {
		// No instance id is (the automator refuses it: server.validID),
		// and the page would show it as it came (a re-review: invalid
		// UTF-8 in the HTML).
		return "", nil, errBadRequest(fmt.Sprintf("%s is not an instance id; start from the first page.", printable.Quote(after)))
	}
	if status != "" && !slices.Contains(instanceStatuses, status) {
		return "", nil, errBadRequest(fmt.Sprintf("%s is not an instance status; the statuses are online, refused, stopped and offline.", printable.Quote(string(status))))
	}
	// Its row alone: a live page reads it again at every refresh, and
	// every account's statistics are thousands of counts.
	rows, err := d.accountRows(r.Context(), name)
	if err != nil {
		return "", nil, err
	}
	if len(rows) != 1 || rows[0].Account != name {
		return "", nil, errNotFound(fmt.Sprintf("There is no account %s.", printable.Quote(name)))
	}
	data := instancesData{Account: rows[0], Status: status, After: after}
	list, err := d.o.Store.InstanceList(r.Context(), name)
	if err != nil {
		return "", nil, err
	}
	// The store lists them by id, byte by byte, as After compares.
	since := d.onlineSince(d.o.Now())
	counts := make(map[server.InstanceStatus]int, len(instanceStatuses))
	var shown []instanceRow
	for _, in := range list {
		st := server.StatusOfInstance(in, since)
		counts[st]++
		if status == "" || st == status {
			shown = append(shown, instanceRow{Instance: in, Status: st})
		}
	}
	for _, st := range instanceStatuses {
		data.ByStatus = append(data.ByStatus, statusCount{Status: st, N: counts[st]})
	}
	data.All, data.Total = len(list), len(shown)
	start := sort.Search(len(shown), func(i int) bool { return shown[i].InstanceID > after })
	end := min(start+d.o.InstancesPageSize, len(shown))
	data.Instances, data.First, data.Last = shown[start:end], start+1, end
	if end < len(shown) {
		v := url.Values{"after": {shown[end-1].InstanceID}}
		if status != "" {
			v.Set("status", string(status))
		}
		data.Next = Prefix + "accounts/" + url.PathEscape(name) + "?" + v.Encode()
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

// row is what a listing shows of unit w: the outcome and exit code for
// everyone, the script name only when reveal. The server keeps what it
// opened of each unit, so a listing read again (a live page's refresh)
// opens nothing it opened before.
func (d *Dashboard) row(ctx context.Context, w store.Work, reveal bool) workRow {
	row := workRow{Work: w, Outcome: w.Reason}
	// A unit of a deleted account opens no more: nothing to warn of.
	_, deleted := store.DeletedAccount(w.Account)
	if !deleted {
		o, err := d.o.Opener.ListedOutcome(ctx, w)
		if err != nil {
			d.log.Warn("dashboard: opening a result", "work_id", w.ID, "err", err)
			row.Outcome = unopened(err)
		}
		if o != nil {
			row.setOutcome(o.ExitCode, o.Failure)
		}
	}
	if reveal && deleted {
		row.Script = deletedScript
	} else if reveal {
		script, err := d.o.Opener.ListedScript(ctx, w)
		switch {
		case errors.Is(err, server.ErrCommandLost):
			script = lostScript
		case err != nil:
			d.log.Warn("dashboard: opening a command", "work_id", w.ID, "err", err)
			script = unopenedScript
		}
		row.Script = script
	}
	row.finish(reveal)
	// Opened: a row keeps no blob (a live page holds its rows until it
	// is read again).
	row.SealedCommand, row.SealedResult = nil, nil
	return row
}

// fullRow is row for a key that may see the command and output (reveal):
// it opens them whole and returns them too, or why the command is not
// shown (unshown).
func (d *Dashboard) fullRow(ctx context.Context, w store.Work) (row workRow, cmd *automatorv1.Command, res *automatorv1.Result, unshown string) {
	row = workRow{Work: w, Outcome: w.Reason}
	if _, deleted := store.DeletedAccount(w.Account); deleted {
		row.Script = deletedScript
		row.finish(true)
		return row, nil, nil, "The command and output are unreadable: the unit's account was deleted, and its key with it."
	}
	res, err := d.o.Opener.OpenResult(ctx, w)
	if err != nil {
		d.log.Warn("dashboard: opening a result", "work_id", w.ID, "err", err)
		row.Outcome = unopened(err)
	}
	if res != nil {
		row.setOutcome(res.GetExitCode(), res.GetFailure())
	}
	cmd, err = d.o.Opener.OpenCommand(ctx, w)
	switch {
	case errors.Is(err, server.ErrCommandLost):
		unshown = "The command was lost with its row in a damaged database (automator repair --salvage kept the unit, ended)."
	case err != nil:
		d.log.Warn("dashboard: opening a command", "work_id", w.ID, "err", err)
		unshown = "The stored command could not be opened (altered in the database?); the automator's log says why."
	}
	row.Script = cmd.GetScript()
	row.finish(true)
	return row, cmd, res, unshown
}

// resultUnopened is the outcome of a unit whose stored result could not
// be opened: the page said "ran to the end" with no exit code and no
// output, and nothing of why (a review, with a result altered in the
// database).
const resultUnopened = "its stored result could not be opened (altered in the database?); the automator's log says why"

// unopened is the outcome shown of a unit whose result OpenResult or
// ListedOutcome refused with err: what contradicts its state, or
// resultUnopened.
func unopened(err error) string {
	if errors.Is(err, server.ErrResultContradicted) {
		return err.Error()
	}
	return resultUnopened
}

// deletedScript is the script name shown, to keys that may see it, of a
// unit whose account was deleted.
const deletedScript = "(unreadable: its account was deleted)"

// unopenedScript and lostScript are the script name shown, to keys that
// may see it, of a unit whose stored command does not open, or was lost
// with its row (its cell was empty, with nothing said: a review).
const (
	unopenedScript = "(unreadable: its stored command does not open)"
	lostScript     = "(lost with its row in a damaged database)"
)

// setOutcome sets what the unit's opened result says: its exit code if it
// succeeded, the proxy's reason if it failed, as the API shows it (the
// proxy's text: a bidi override or an escape sequence in it is not shown
// as it is).
func (row *workRow) setOutcome(code int32, failure string) {
	if row.State == store.StateSucceeded {
		row.ExitCode = &code
	}
	if row.State == store.StateFailed && failure != "" {
		row.Outcome = server.PrintableFailure(failure)
	}
}

// finish words the outcome for the viewer: the proxy's reason for a
// failure names the script (unknown script, cannot start it), so it is
// shown only where the script name is.
func (row *workRow) finish(reveal bool) {
	if row.State == store.StateSucceeded && row.Outcome == "" {
		row.Outcome = "ran to the end"
	}
	if row.State == store.StateFailed && !reveal && row.Outcome != resultUnopened {
		row.Outcome = hiddenFailure
	}
}

// hiddenFailure is the outcome of a failed unit for keys that may not see
// its command: either way a unit fails, without saying which.
const hiddenFailure = "the proxy could not run the command, or killed it when the proxy stopped (reason hidden)"

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
	if data.Account != "" && !server.AccountNamePattern.MatchString(data.Account) && !deletedName(data.Account) {
		return "", nil, errBadRequest(fmt.Sprintf("%s is not an account name.", printable.Quote(data.Account)))
	}
	if data.State != "" && !data.State.Valid() {
		return "", nil, errBadRequest(fmt.Sprintf("%s is not a state; the states are queued, claimed, succeeded, failed, timed_out and cancelled.", printable.Quote(string(data.State))))
	}
	// Without their sealed blobs: the server reads again only the units
	// whose listed parts it does not keep (Opener.ListedOutcome), and the
	// page is listed again with them when that is most of it.
	p := store.WorkListParams{Account: data.Account, State: data.State, Limit: d.o.PageSize, WithoutSealed: true}
	if b := q.Get("before"); b != "" {
		at, id, ok := parseCursor(b)
		if !ok {
			return "", nil, errBadRequest("The page position (before=) is not valid; start from the first page.")
		}
		p.BeforeQueuedAt, p.BeforeID = at, id
	}
	ctx := r.Context()
	// The account filter is in the page's controls, which a live page's
	// updates do not hold: only the page loaded whole reads the accounts,
	// and their rows only (not their statistics).
	if !streaming(r) {
		accounts, err := d.o.Store.AccountList(ctx)
		if err != nil {
			return "", nil, err
		}
		for _, a := range accounts {
			data.Accounts = append(data.Accounts, a.Name)
		}
	}
	// One more than a page: whether there is an older page (a list of
	// exactly a page offered one, which was empty, a review found).
	p.Limit++
	list, err := d.o.Store.WorkList(ctx, p)
	p.Limit--
	if err != nil {
		return "", nil, err
	}
	more := len(list) > p.Limit
	list = list[:min(len(list), p.Limit)]
	unknown := 0
	for _, w := range list {
		if !d.o.Opener.ListedKnown(w, s.Reveal) {
			unknown++
		}
	}
	if 2*unknown > len(list) {
		// Most of the page was never opened here (the first listing since
		// the automator started, an older page): listed again with the
		// blobs, a few units a query rather than one. A page read again as
		// it refreshes has only its units that ended since to read, each
		// alone, and its other blobs stay unread.
		if data.Rows, err = d.wholeRows(ctx, p, s.Reveal); err != nil {
			return "", nil, err
		}
	} else {
		for _, w := range list {
			data.Rows = append(data.Rows, d.row(ctx, w, s.Reveal))
		}
	}
	if more && len(data.Rows) > 0 {
		last := data.Rows[len(data.Rows)-1]
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

// wholeChunk is the most units a page listed with their sealed blobs
// (wholeRows) reads a query: what it holds at once, each unit's output
// weighing up to megabytes.
const wholeChunk = 10

// wholeRows lists the page p selects with its units' sealed blobs,
// wholeChunk units a query, and returns its rows.
func (d *Dashboard) wholeRows(ctx context.Context, p store.WorkListParams, reveal bool) ([]workRow, error) {
	var rows []workRow
	page := p.Limit
	p.WithoutSealed = false
	for len(rows) < page {
		p.Limit = min(wholeChunk, page-len(rows))
		list, err := d.o.Store.WorkList(ctx, p)
		if err != nil {
			return nil, err
		}
		for _, w := range list {
			rows = append(rows, d.row(ctx, w, reveal))
		}
		if len(list) < p.Limit {
			break
		}
		last := list[len(list)-1]
		p.BeforeQueuedAt, p.BeforeID = last.QueuedAt, last.ID
	}
	return rows, nil
}

func parseCursor(s string) (time.Time, string, bool) {
	n, id, ok := strings.Cut(s, ".")
	if !ok || id == "" || !store.Text(id) {
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
	// CommandUnshown says why Command is not shown, when it is not.
	CommandUnshown string
}

// unit: one unit's timeline, outcome and, for keys that may see them, its
// command and output.
// unchanged reports whether the unit shown, ended, is still as it was
// read: a read of its row without the sealed command and result (up to
// megabytes, which its page opens and renders again at every refresh)
// finds it under the same account, in the same state, with the same
// times, claimer and key. An ended unit changes no more, but its account
// may be deleted (its units then shown under the tombstone, unreadable),
// or the unit purged: then it is not found as it was, and the page is
// read again. (settled)
func (u unitData) unchanged(ctx context.Context, st Store) bool {
	w := u.Work
	if w.FinishedAt.IsZero() {
		return false
	}
	// Its queue time and a microsecond (PostgreSQL's precision) bound the
	// listing from above: units queued in that microsecond with a
	// greater id come first, so a few are read.
	list, err := st.WorkList(ctx, store.WorkListParams{Account: w.Account, State: w.State,
		BeforeQueuedAt: w.QueuedAt.Add(time.Microsecond), Limit: 8, WithoutSealed: true})
	if err != nil {
		return false
	}
	for _, l := range list {
		if l.ID == w.ID {
			return l.Account == w.Account && l.State == w.State && l.KeyID == w.KeyID && l.InstanceID == w.InstanceID &&
				l.ClaimID == w.ClaimID && l.Reason == w.Reason && l.QueuedAt.Equal(w.QueuedAt) && l.Deadline.Equal(w.Deadline) &&
				l.ClaimedAt.Equal(w.ClaimedAt) && l.FinishedAt.Equal(w.FinishedAt)
		}
	}
	return false
}

func (d *Dashboard) unit(r *http.Request, s *session) (string, any, error) {
	id := r.PathValue("id")
	w, err := d.o.Store.WorkGet(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil, errNotFound(fmt.Sprintf("There is no unit of work %s.", printable.Quote(id)))
	}
	if err != nil {
		return "", nil, err
	}
	data := unitData{Reveal: s.Reveal, RevealKeys: d.revealKeys()}
	if s.Reveal {
		data.workRow, data.Command, data.Result, data.CommandUnshown = d.fullRow(r.Context(), w)
	} else {
		data.workRow = d.row(r.Context(), w, false)
	}
	return "Work " + id, data, nil
}

// deletedName reports whether name is the name the units of a deleted
// account keep ("acme (deleted …)"), which a unit's page links the work
// list to.
func deletedName(name string) bool {
	base, ok := store.DeletedAccount(name)
	return ok && server.AccountNamePattern.MatchString(base) && store.Text(name)
}
