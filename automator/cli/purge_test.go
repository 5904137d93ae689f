//go:build linux

package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
)

// TestServeDeletesEndedUnitsPastWorkRetention: with work_retention set,
// serve deletes the ended units queued longer ago than that as it starts
// (and every hour after), and keeps the rest.
func TestServeDeletesEndedUnitsPastWorkRetention(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.WorkRetention = 48 * time.Hour
	if err := config.Save(dir, cfg); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := Main(t.Context(), []string{"account", "create", "acme", "--data-dir", dir}, Env{Stdout: &out, Stderr: &errb}); code != 0 {
		t.Fatalf("account create: %s", errb.String())
	}
	st, err := sqlitestore.Open(t.Context(), cfg.DBPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	for id, age := range map[string]time.Duration{"w_old": 72 * time.Hour, "w_young": 24 * time.Hour} {
		queued := time.Now().Add(-age)
		if _, err := st.WorkEnqueue(t.Context(), store.WorkEnqueueParams{ID: id, Account: "acme", KeyID: 1, SealedCommand: []byte("c"), Now: queued, Deadline: queued.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.WorkCancel(t.Context(), store.WorkCancelParams{ID: id, Reason: "test", Now: queued}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	s := serveDirInProcess(t, dir)
	automatortest.WaitFor(t, 15*time.Second, "serve to log its purge", func() bool {
		return strings.Contains(s.log.String(), `"msg":"deleted ended units past the retention","replica_id"`)
	})
	if log := s.log.String(); !strings.Contains(log, `"count":1,`) {
		t.Errorf("the purge's log line does not count 1 unit:\n%s", log)
	}
	st, err = sqlitestore.Open(t.Context(), cfg.DBPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.WorkGet(t.Context(), "w_old"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the unit queued 72 h ago, past a 48 h retention: %v; want it deleted", err)
	}
	if _, err := st.WorkGet(t.Context(), "w_young"); err != nil {
		t.Errorf("the unit queued 24 h ago, within a 48 h retention: %v; want it kept", err)
	}
}

// TestServeDeletesTheSignOutsOfExpiredDashboardSessions: serve deletes the
// records of dashboard sign-outs whose sessions expired over an hour ago as
// it starts (and every hour after), with or without work_retention, and
// keeps those of sessions that could still be used.
func TestServeDeletesTheSignOutsOfExpiredDashboardSessions(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlitestore.Open(t.Context(), cfg.DBPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	for id, expires := range map[string]time.Duration{"expired": -2 * time.Hour, "current": time.Hour} {
		if err := st.DashboardSessionEnd(t.Context(), store.DashboardSessionEndParams{ID: id, Expires: time.Now().Add(expires)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	s := serveDirInProcess(t, dir)
	automatortest.WaitFor(t, 15*time.Second, "serve to log its purge of sign-outs", func() bool {
		return strings.Contains(s.log.String(), `"msg":"deleted the sign-outs of expired dashboard sessions","replica_id"`)
	})
	st, err = sqlitestore.Open(t.Context(), cfg.DBPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for id, want := range map[string]bool{"expired": false, "current": true} {
		if got, err := st.DashboardSessionEnded(t.Context(), id); err != nil || got != want {
			t.Errorf("sign-out of the %s session recorded: %v, %v; want %v", id, got, err, want)
		}
	}
}

// TestServeFinishesAnUnfinishedAccountDeletion: an account deletion left
// unfinished is finished by serve, as it starts, without any command: it
// logs as it starts and ends, and the name is free.
func TestServeFinishesAnUnfinishedAccountDeletion(t *testing.T) {
	dir := initDir(t)
	d := unfinishedDeletion(t, dir, "acme", time.Now())
	s := serveDirInProcess(t, dir)
	automatortest.WaitFor(t, 15*time.Second, "serve to log that it finished the deletion", func() bool {
		return strings.Contains(s.log.String(), `"msg":"finished an account deletion left unfinished: its name is free"`)
	})
	if log := s.log.String(); !strings.Contains(log, `"msg":"finishing an account deletion left unfinished: moving its units left under its tombstone, in batches"`) ||
		!strings.Contains(log, `"units_left":150`) || !strings.Contains(log, `"units_moved":150`) {
		t.Errorf("serve's log does not say it finishes the deletion of 150 units:\n%s", log)
	}
	if code, _, stderr := runMain(t, "account", "create", "acme", "--data-dir", dir); code != 0 {
		t.Errorf("account create once serve finished the deletion: exit %d: %s", code, stderr)
	}
	if code, out, stderr := runMain(t, "work", "list", "--account", d.Tombstone, "--limit", "1000", "--data-dir", dir, "--json"); code != 0 || strings.Count(out, `"work_id"`) != 150 {
		t.Errorf("work list of the tombstone: exit %d, stderr %q; want its 150 units:\n%s", code, stderr, out)
	}
}

// TestServeDeletesAuditEventsPastAuditRetention: with audit_retention set,
// serve deletes the audit events stamped longer ago than that as it starts
// (and every hour after), keeps the rest, and records what it deleted in
// an audit.purged event.
func TestServeDeletesAuditEventsPastAuditRetention(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AuditRetention = 48 * time.Hour
	if err := config.Save(dir, cfg); err != nil {
		t.Fatal(err)
	}
	st, err := sqlitestore.Open(t.Context(), cfg.DBPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []struct {
		detail string
		age    time.Duration
	}{{"old", 72 * time.Hour}, {"young", 24 * time.Hour}} {
		if _, err := st.AuditAppend(t.Context(), store.AuditEvent{At: time.Now().Add(-e.age), Kind: store.AuditAuthFailed, Detail: e.detail}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	s := serveDirInProcess(t, dir)
	automatortest.WaitFor(t, 15*time.Second, "serve to log its purge of the audit log", func() bool {
		return strings.Contains(s.log.String(), `"msg":"deleted audit events past the retention","replica_id"`)
	})
	// The old event goes, though appended after init's, which stay.
	code, out, stderr := runMain(t, "audit", "--data-dir", dir, "--json")
	if code != 0 {
		t.Fatalf("audit: exit %d: %s", code, stderr)
	}
	var details []string
	var purged auditJSON
	for line := range strings.Lines(out) {
		var e auditJSON
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		details = append(details, e.Detail)
		if e.Kind == store.AuditPurged {
			purged = e
		}
	}
	if slices.Contains(details, "old") || !slices.Contains(details, "young") {
		t.Errorf("the audit log after a purge of 48 h: %q; want the event of 72 h ago gone, that of 24 h ago kept", details)
	}
	if purged.Actor != "automator" || !strings.HasPrefix(purged.Detail, "audit_retention 48h0m0s: the events stamped before ") {
		t.Errorf("the purge's event: %+v; want audit.purged by automator, naming the retention and how far", purged)
	}
}
