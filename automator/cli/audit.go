package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/clihelp"
	"github.com/opsgate/opsgate/internal/printable"
)

// auditPage is how many events one store call reads.
const auditPage = 1000

// cmdAudit prints the audit log, oldest first: `automator audit --data-dir
// DIR [--db DSN] [--since DUR] [--json]`. Script names are stored sealed with the
// master key; this command, which reads the master key, shows them.
func cmdAudit(ctx context.Context, args []string, env Env) error {
	fs := newFlags("audit", env)
	dir := fs.String("data-dir", "", "the automator's data directory")
	db := dbFlag(fs)
	since := clihelp.Duration(fs, "since", 0, "only events of the last DUR (default: every event)")
	asJSON := fs.Bool("json", false, "one JSON object per event")
	if err := clihelp.ParseNoArgs(fs, args); err != nil {
		return err
	}
	if *since < 0 {
		return fmt.Errorf("--since %v must be positive", *since)
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
	p := store.AuditListParams{Limit: auditPage}
	if *since > 0 {
		p.Since = time.Now().Add(-*since)
	}
	enc := json.NewEncoder(env.Stdout)
	for {
		events, err := st.AuditList(ctx, p)
		if err != nil {
			return err
		}
		for _, e := range events {
			script := openScript(master, e)
			if *asJSON {
				if err := enc.Encode(auditJSON{
					Seq: e.Seq, At: e.At.UTC(), Kind: e.Kind, Actor: e.Actor, Source: e.Source, Account: e.Account,
					WorkID: e.WorkID, InstanceID: e.InstanceID, Outcome: e.Outcome, Script: script, Detail: e.Detail,
				}); err != nil {
					return err
				}
				continue
			}
			// A stdout that cannot take the log (a full disk under
			// `> audit.txt`) fails the command, as the other listings do.
			if _, err := fmt.Fprintln(env.Stdout, auditLine(e, script)); err != nil {
				return err
			}
		}
		if len(events) < p.Limit {
			return nil
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
