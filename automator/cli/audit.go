package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/clihelp"
	"github.com/opsgate/opsgate/internal/printable"
)

// auditPage is how many events one store call reads.
const auditPage = 1000

// cmdAudit prints the audit log, oldest first: `automator audit --data-dir
// DIR [--db DSN] [--since DUR] [--account NAME] [--work ID] [--kind
// KIND,...] [--json]`. Script names are stored sealed with the master key;
// this command, which reads the master key, shows them.
func cmdAudit(ctx context.Context, args []string, env Env) error {
	fs := newFlags("audit", env)
	dir := fs.String("data-dir", "", "the automator's data directory")
	db := dbFlag(fs)
	since := clihelp.Duration(fs, "since", 0, "only events of the last DUR (default: every event)")
	account := fs.String("account", "", "only the events of this account (deleted ones too)")
	work := fs.String("work", "", "only the events of this unit of work (a work id, w_…)")
	kinds := fs.String("kind", "", "only events of these kinds, comma-separated: a kind (work.ended) or a family (work, auth, account, …)")
	asJSON := fs.Bool("json", false, "one JSON object per event")
	if err := clihelp.ParseNoArgs(fs, args); err != nil {
		return err
	}
	if *since < 0 {
		return fmt.Errorf("--since %v must be positive", *since)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, f := range []struct{ name, value, every string }{{"account", *account, "account"}, {"work", *work, "unit"}, {"kind", *kinds, "kind"}} {
		// Given, and empty (a script's variable left empty): not taken
		// for no filter, which would list every event.
		if set[f.name] && f.value == "" {
			return fmt.Errorf("--%s is empty; leave it out to list the events of every %s", f.name, f.every)
		}
	}
	if *account != "" && !server.AccountNamePattern.MatchString(*account) {
		return fmt.Errorf("--account %s is not an account name: it must match %s", printable.Quote(*account), server.AccountNamePattern)
	}
	if *work != "" && !store.ValidWorkID(*work) {
		return fmt.Errorf("--work %q is not a work id (w_ and 32 hexadecimal digits)", *work)
	}
	p := store.AuditListParams{Limit: auditPage, Account: *account, WorkID: *work}
	if *kinds != "" {
		var err error
		if p.Kinds, err = auditKinds(*kinds); err != nil {
			return err
		}
	}
	st, err := openDataStore(ctx, *dir, *db)
	if err != nil {
		return err
	}
	defer st.Close()
	master, err := readMaster(*dir)
	if err != nil {
		return err
	}
	if *since > 0 {
		p.Since = time.Now().Add(-*since)
	}
	if *work == "" {
		n, err := printAudit(ctx, st, master, p, env.Stdout, *asJSON)
		if err == nil && n == 0 && *account != "" {
			err = knownAccount(ctx, st, *account, *dir, *db)
		}
		return err
	}
	// No index holds the work id: start at the unit's time rather than
	// read the whole log.
	from, byID, err := workAuditFrom(ctx, st, *work)
	if err != nil {
		return err
	}
	since0 := p.Since
	if from.After(p.Since) {
		p.Since = from
	}
	n, err := printAudit(ctx, st, master, p, env.Stdout, *asJSON)
	if err == nil && n == 0 && byID && p.Since != since0 {
		// Dated by an id of the first releases, whose time is random
		// bits that may read later than the unit: read it all.
		p.Since = since0
		_, err = printAudit(ctx, st, master, p, env.Stdout, *asJSON)
	}
	return err
}

// knownAccount returns nil when account exists or the audit log holds an
// event of it (a deleted account's), and otherwise an error saying it is
// unknown: a misspelt name listed nothing, as an account without events
// since --since does, and exited 0.
func knownAccount(ctx context.Context, st store.Store, account, dir, db string) error {
	_, err := st.AccountGet(ctx, account)
	if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	events, err := st.AuditList(ctx, store.AuditListParams{Limit: 1, Account: account})
	if err != nil || len(events) > 0 {
		return err
	}
	return fmt.Errorf("--account: there is no account %q, now or in the audit log; `automator account list --data-dir %s%s` lists them", account, dir, withSameDB(db))
}

// printAudit prints the events p selects, a page at a time, as JSON or as
// lines, and returns how many.
func printAudit(ctx context.Context, st store.Store, master crypto.MasterKey, p store.AuditListParams, out io.Writer, asJSON bool) (int, error) {
	enc := json.NewEncoder(out)
	n := 0
	for {
		events, err := st.AuditList(ctx, p)
		if err != nil {
			return n, err
		}
		for _, e := range events {
			n++
			script := openScript(master, e)
			if asJSON {
				if err := enc.Encode(auditJSON{
					Seq: e.Seq, At: e.At.UTC(), Kind: e.Kind, Actor: e.Actor, Source: e.Source, Account: e.Account,
					WorkID: e.WorkID, InstanceID: e.InstanceID, Outcome: e.Outcome, Script: script, Detail: e.Detail,
				}); err != nil {
					return n, err
				}
				continue
			}
			// A stdout that cannot take the log (a full disk under
			// `> audit.txt`) fails the command, as the other listings do.
			if _, err := fmt.Fprintln(out, auditLine(e, script)); err != nil {
				return n, err
			}
		}
		if len(events) < p.Limit {
			return n, nil
		}
		p.AfterSeq = events[len(events)-1].Seq
	}
}

type auditJSON struct {
	Seq        int64     `json:"seq"`
	At         time.Time `json:"at"`
	Kind       string    `json:"kind"`
	Actor      string    `json:"actor,omitempty"`
	Source     string    `json:"source,omitempty"`
	Account    string    `json:"account,omitempty"`
	WorkID     string    `json:"work_id,omitempty"`
	InstanceID string    `json:"instance_id,omitempty"`
	Outcome    string    `json:"outcome,omitempty"`
	Script     string    `json:"script,omitempty"`
	Detail     string    `json:"detail,omitempty"`
}

// openScript returns an event's script name, or a note when it has one
// that this master key does not open.
func openScript(master crypto.MasterKey, e store.AuditEvent) string {
	if e.SealedScript == nil {
		return ""
	}
	name, err := master.OpenAuditField(e.WorkID, e.SealedScript)
	if err != nil {
		return "(sealed; does not open with this master key)"
	}
	return string(name)
}

// auditLine is one event as "TIME KIND key=value ...", values quoted when
// they hold spaces or quotes, or a character that does not show as it is.
func auditLine(e store.AuditEvent, script string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %-20s", e.At.UTC().Format("2006-01-02T15:04:05.000Z"), e.Kind)
	for _, f := range []struct{ k, v string }{
		{"actor", e.Actor}, {"source", e.Source}, {"account", e.Account}, {"work", e.WorkID},
		{"instance", e.InstanceID}, {"outcome", e.Outcome}, {"script", script}, {"detail", e.Detail},
	} {
		if f.v == "" {
			continue
		}
		v := f.v
		// Quoted too when a character would not show as it is: a
		// caller's script name may hold an escape sequence, or a bidi
		// override.
		if strings.ContainsAny(v, " \"=\t\n") || printable.Check(v) != nil {
			v = fmt.Sprintf("%q", v)
		}
		fmt.Fprintf(&b, " %s=%s", f.k, v)
	}
	return b.String()
}

// auditKinds turns --kind's comma-separated list into the kinds it names: a
// kind itself, or a family (the part before the dot) for all of its kinds.
func auditKinds(list string) ([]string, error) {
	var out []string
	for _, k := range strings.Split(list, ",") {
		k = strings.TrimSpace(k)
		named, ok := auditFamilies[k]
		if !ok && slices.Contains(store.AuditKinds, k) {
			named, ok = []string{k}, true
		}
		if !ok {
			return nil, fmt.Errorf("--kind %q is not a kind of audit event; the kinds are %s, or their families %s",
				k, strings.Join(store.AuditKinds, ", "), strings.Join(slices.Sorted(maps.Keys(auditFamilies)), ", "))
		}
		for _, kind := range named {
			if !slices.Contains(out, kind) {
				out = append(out, kind)
			}
		}
	}
	return out, nil
}

// auditFamilies are the kinds of audit events by family, the part of a
// kind before its dot.
var auditFamilies = func() map[string][]string {
	m := map[string][]string{}
	for _, kind := range store.AuditKinds {
		f, _, _ := strings.Cut(kind, ".")
		m[f] = append(m[f], kind)
	}
	return m
}()

// auditSlack is how long before a unit was queued `audit --work` starts
// reading: its events are stamped by the clocks of the replicas and hosts
// that wrote them, which may be behind the one that queued it.
const auditSlack = 24 * time.Hour

// workAuditFrom is when the events of unit id can begin: a day before it
// was queued. A unit the retention purge removed is dated by its id, which
// holds the time it was made (store.NewWorkID), and byID says so: the
// first releases made ids at random, whose time may read later than the
// unit (the caller then reads the whole log when it finds nothing), or
// ages ahead (no start then).
func workAuditFrom(ctx context.Context, st store.Store, id string) (from time.Time, byID bool, err error) {
	w, err := st.WorkGet(ctx, id)
	switch {
	case err == nil:
		return w.QueuedAt.Add(-auditSlack), false, nil
	case !errors.Is(err, store.ErrNotFound):
		return time.Time{}, false, err
	}
	t, ok := store.WorkIDTime(id)
	if !ok || t.After(time.Now().Add(auditSlack)) {
		return time.Time{}, false, nil
	}
	return t.Add(-auditSlack), true, nil
}
