package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/waittest"
)

// TestRotateKeyInterruptedAfterItsCommitStillPrintsTheProfile: rotate-key
// interrupted (Ctrl-C) once its rotation is committed, while it waits out
// the automators' cached credentials, has changed the account for good:
// it must still print the new profile (the only copy of the new token)
// and record the rotation in the audit log, or the account is left with a
// token and key nobody holds and no record of the change.
func TestRotateKeyInterruptedAfterItsCommitStillPrintsTheProfile(t *testing.T) {
	dir := initDir(t)
	if code := Main(t.Context(), []string{"account", "create", "acme", "--data-dir", dir}, Env{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}); code != 0 {
		t.Fatalf("account create acme: exit %d", code)
	}
	raw, err := sqlitestore.Open(t.Context(), filepath.Join(dir, "automator.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out, errb bytes.Buffer
	done := make(chan int)
	go func() {
		done <- Main(ctx, []string{"account", "rotate-key", "acme", "--data-dir", dir, "--overlap", "0"}, Env{Stdout: &out, Stderr: &errb})
	}()
	// The commit is visible in the database; the command then waits
	// store.CredentialTTL before it goes on. Interrupt it there.
	var code int
	for committed, deadline := false, time.Now().Add(waittest.Bound); !committed; {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for rotate-key to commit the new key", waittest.Bound)
		}
		select {
		case code = <-done:
			t.Fatalf("rotate-key ended (exit %d) before the test saw its commit: %s", code, errb.String())
		default:
		}
		keys, err := raw.AccountKeys(t.Context(), "acme")
		if err != nil {
			t.Fatal(err)
		}
		committed = len(keys) == 2
	}
	cancel()
	code = waittest.Recv(t, done, "rotate-key to return once interrupted after its commit")

	token := regexp.MustCompile(`(?m)^token: (opt_\S+)$`).FindStringSubmatch(out.String())
	if token == nil || !regexp.MustCompile(`(?m)^key: 2:`).MatchString(out.String()) {
		t.Fatalf("rotate-key interrupted after its commit: exit %d, stdout:\n%s\nstderr: %s\nwant the new profile (token, key 2)", code, out.String(), errb.String())
	}
	if _, err := raw.AccountGetByToken(t.Context(), store.AccountGetByTokenParams{TokenHash: crypto.HashToken(token[1]), Now: time.Now()}); err != nil {
		t.Errorf("the printed token is not the account's: %v", err)
	}
	events, err := raw.AuditList(t.Context(), store.AuditListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range events {
		found = found || (e.Kind == store.AuditKeyRotated && e.Account == "acme")
	}
	if !found {
		t.Errorf("no %s event for acme in the audit log after the interrupted rotate-key (stderr: %s)", store.AuditKeyRotated, errb.String())
	}
}
