package cli

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
)

// TestAChangeWhoseAuditEventCannotBeWrittenIsNotMade: each administrative
// change commits with its audit event, in one transaction. With the audit
// log refusing every insert (a trigger), each command fails with one error
// that says so, prints nothing else, and changes nothing: no account made,
// deleted or rotated, no API key made or revoked.
func TestAChangeWhoseAuditEventCannotBeWrittenIsNotMade(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	for _, args := range [][]string{
		{"account", "create", "acme"},
		{"account", "create", "globex"},
		{"apikey", "create", "ci", "--accounts", "globex"},
	} {
		if code, _, stderr := runCLI(t, append(args, "--data-dir", dir)...); code != 0 {
			t.Fatalf("%s: exit %d: %s", strings.Join(args, " "), code, stderr)
		}
	}
	dbPath := filepath.Join(dir, "automator.db")
	type state struct {
		accounts []store.Account
		keys     []store.APIKey
		events   int
	}
	read := func() state {
		t.Helper()
		st, err := sqlitestore.Open(t.Context(), dbPath)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		var s state
		if s.accounts, err = st.AccountList(t.Context()); err != nil {
			t.Fatal(err)
		}
		if s.keys, err = st.APIKeyList(t.Context()); err != nil {
			t.Fatal(err)
		}
		events, err := st.AuditList(t.Context(), store.AuditListParams{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		s.events = len(events)
		return s
	}
	before := read()
	i := slices.IndexFunc(before.keys, func(k store.APIKey) bool { return k.Name == "ci" })
	if i < 0 {
		t.Fatalf("no API key named ci among %+v", before.keys)
	}
	ci := before.keys[i].ID

	execSQLite(t, dbPath, `CREATE TRIGGER test_refuse_audit BEFORE INSERT ON audit
BEGIN SELECT RAISE(ABORT, 'the test refuses every audit event'); END`)
	for _, args := range [][]string{
		{"account", "create", "initech"},
		{"account", "delete", "globex"},
		{"account", "rotate-token", "acme", "--overlap", "0"},
		{"account", "rotate-key", "acme"},
		{"apikey", "create", "ops", "--all-accounts"},
		{"apikey", "revoke", ci},
	} {
		code, stdout, stderr := runCLI(t, append(args, "--data-dir", dir)...)
		if code == 0 || stdout != "" || strings.Count(stderr, "\n") != 1 ||
			!strings.Contains(stderr, "audit log") || !strings.Contains(stderr, "the test refuses every audit event") {
			t.Errorf("%s with the audit log refusing: exit %d, stdout %q, stderr %q; want a failure, and one line saying the audit log refused its event",
				strings.Join(args, " "), code, stdout, stderr)
		}
	}
	after := read()
	if !slices.EqualFunc(after.accounts, before.accounts, func(a, b store.Account) bool {
		return a.Name == b.Name && bytes.Equal(a.TokenHash, b.TokenHash) && a.KeyID == b.KeyID
	}) {
		t.Errorf("accounts after the refused commands = %+v, want them unchanged: %+v", after.accounts, before.accounts)
	}
	if !slices.EqualFunc(after.keys, before.keys, func(a, b store.APIKey) bool {
		return a.ID == b.ID && a.RevokedAt.Equal(b.RevokedAt) && slices.Equal(a.Accounts, b.Accounts)
	}) {
		t.Errorf("API keys after the refused commands = %+v, want them unchanged: %+v", after.keys, before.keys)
	}
	if after.events != before.events {
		t.Errorf("the audit log holds %d events, want the %d it had", after.events, before.events)
	}

	// The trigger was the only obstacle.
	execSQLite(t, dbPath, `DROP TRIGGER test_refuse_audit`)
	if code, _, stderr := runCLI(t, "account", "create", "initech", "--data-dir", dir); code != 0 {
		t.Fatalf("account create initech once the audit log takes events again: exit %d: %s", code, stderr)
	}
	withStore(t, dir, func(st *sqlitestore.Store) {
		if _, err := st.AccountGet(t.Context(), "initech"); errors.Is(err, store.ErrNotFound) {
			t.Errorf("account initech not made once the audit log takes events again")
		}
	})
}
