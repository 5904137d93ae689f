package dashboard_test

import (
	"context"
	"database/sql"
	"errors"
	"html"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestUnitsOfADeletedAccountAreListedAsUnreadable: once an account is
// deleted its units are listed under its deleted name, their script shown
// as unreadable (its key is gone), and the account leaves the accounts
// page; no page fails on them.
func TestUnitsOfADeletedAccountAreListedAsUnreadable(t *testing.T) {
	e := newEnv(t)
	now := e.clock.Now()
	e.enqueue("w_ran", "acme", now.Add(-time.Minute), &automatorv1.Command{Script: "backup.sh"})
	e.run("acme", "a-1", now.Add(-59*time.Second), now.Add(-58*time.Second), &automatorv1.Result{ExitCode: 0, Stdout: []byte("done")})
	e.enqueue("w_queued", "acme", now.Add(-30*time.Second), &automatorv1.Command{Script: "backup.sh"})
	if _, err := e.st.AccountDelete(t.Context(), store.AccountDeleteParams{Name: "acme", Reason: `account "acme" was deleted`, Now: now}); err != nil {
		t.Fatal(err)
	}

	admin := client(t)
	e.signIn(admin, e.url, "admin")
	code, list := get(t, admin, e.url+"/dashboard/work")
	if code != http.StatusOK || strings.Count(list, "acme (deleted ") < 2 || strings.Count(list, "(unreadable: its account was deleted)") != 2 || strings.Contains(list, "backup.sh") {
		t.Errorf("work list with units of a deleted account: %d\n%s\nwant both, under the deleted name, their script unreadable", code, list)
	}
	for _, id := range []string{"w_ran", "w_queued"} {
		code, unit := get(t, admin, e.url+"/dashboard/work/"+id)
		if code != http.StatusOK || !strings.Contains(unit, "acme (deleted ") || strings.Contains(unit, "backup.sh") ||
			!strings.Contains(unit, "unreadable: the unit&#39;s account was deleted") || strings.Contains(unit, "log says why") {
			t.Errorf("the page of unit %s of a deleted account: %d\n%s\nwant it saying its command is unreadable, its account deleted (not to see the log: it says nothing of it)", id, code, unit)
		}
		// Its links lead somewhere: the work list of the deleted name
		// (it lists the unit), and no account page of a name that is
		// no account's.
		if strings.Contains(unit, `href="/dashboard/accounts/acme`) {
			t.Errorf("the page of unit %s links to an account page of the deleted account", id)
		}
		i := strings.Index(unit, `href="/dashboard/work?account=`)
		if i < 0 {
			t.Fatalf("the page of unit %s has no link to its account's units", id)
		}
		link := html.UnescapeString(unit[i+len(`href="`):])
		link = link[:strings.IndexByte(link, '"')]
		if code, list := get(t, admin, e.url+link); code != http.StatusOK || !strings.Contains(list, id) {
			t.Errorf("the link %s of unit %s's page: %d, want its deleted account's units, it among them", link, id, code)
		}
	}
	if code, accounts := get(t, admin, e.url+"/dashboard/"); code != http.StatusOK || strings.Contains(accounts, `data-account="acme"`) || !strings.Contains(accounts, `data-account="globex"`) {
		t.Errorf("accounts page after acme's deletion: %d\n%s\nwant globex only", code, accounts)
	}
}

// TestAccountsPageListsTheAccountsBeingDeleted: an account whose deletion
// stopped before its units moved under its tombstone (its name still
// taken) is listed after the accounts, as `automator account list` lists
// it: deleting, with the units it has left to move and its tombstone, and
// no link to pages of an account that is gone; once its deletion is
// finished it is no longer listed.
func TestAccountsPageListsTheAccountsBeingDeleted(t *testing.T) {
	e := newEnv(t)
	db, err := sql.Open("sqlite", "file:"+e.path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// More units than SQLite moves in the deletion's own transaction.
	if _, err := db.Exec(`INSERT INTO work (id, account, state, key_id, sealed_command, queued_at, deadline, finished_at)
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 150)
SELECT 'w' || i, 'acme', 'succeeded', 1, randomblob(64), i, i + 1000, i + 1 FROM n`); err != nil {
		t.Fatal(err)
	}
	stop, cancel := context.WithCancel(t.Context())
	defer cancel()
	d, err := e.st.AccountDelete(stop, store.AccountDeleteParams{Name: "acme", Now: e.clock.Now(),
		Moving: func(store.AccountDeletion, int) { cancel() }})
	if !errors.Is(err, store.ErrDeletionUnfinished) {
		t.Fatalf("AccountDelete stopped before its first batch: %v, want ErrDeletionUnfinished", err)
	}

	c := client(t)
	e.signIn(c, e.url, "viewer")
	code, body := get(t, c, e.url+"/dashboard/")
	for _, want := range []string{
		`<tr data-account="globex" class="status-`,
		`<h2>Accounts being deleted</h2>`,
		`<table id="accounts-deleting">`,
		`<tr data-deleting="acme" class="status-deleting">
    <td>acme</td>
    <td><span class="badge status status-deleting">deleting</span></td>
    <td class="num units-left">150</td>
    <td class="tombstone">` + html.EscapeString(d.Tombstone) + `</td>
  </tr>`,
	} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("accounts page (%d) with acme being deleted lacks %s:\n%s", code, want, body)
		}
	}
	if strings.Contains(body, `data-account="acme"`) || strings.Contains(body, `href="/dashboard/accounts/acme"`) {
		t.Errorf("accounts page lists acme, being deleted, as an account, or links to its pages:\n%s", body)
	}

	if _, err := e.st.AccountDelete(t.Context(), store.AccountDeleteParams{Name: "acme", Resume: true, Now: e.clock.Now()}); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, c, e.url+"/dashboard/"); code != http.StatusOK || strings.Contains(body, "accounts-deleting") || strings.Contains(body, "acme") {
		t.Errorf("accounts page (%d) once acme's deletion is finished still lists it:\n%s", code, body)
	}
}

// TestAUnitWhoseSealedBlobsDoNotOpenSaysSo: a unit whose stored result
// does not open (altered in the database) is not shown as having "ran to
// the end" with no exit code and no output and nothing of why (a review):
// its outcome says the result could not be opened, on its page for every
// key and in the work list; one whose command does not open says so where
// the command would be.
func TestAUnitWhoseSealedBlobsDoNotOpenSaysSo(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	now := e.clock.Now()
	e.enqueue("w_altered", "acme", now.Add(-time.Minute), &automatorv1.Command{Script: "backup.sh"})
	ws, err := e.st.WorkClaim(ctx, store.WorkClaimParams{Account: "acme", InstanceID: "a-1", Max: 1, ClaimIDs: []string{"c"}, Now: now.Add(-59 * time.Second)})
	if err != nil || len(ws) != 1 {
		t.Fatalf("claim: %v %v", ws, err)
	}
	// A result sealed for another unit: what an altered one is to the key.
	if _, err := e.st.WorkComplete(ctx, store.WorkCompleteParams{ID: "w_altered", ClaimID: ws[0].ClaimID, State: store.StateSucceeded,
		SealedResult: e.seal("acme", "w_other", crypto.DirResult, &automatorv1.Result{ExitCode: 3, Stdout: []byte("done")}), Now: now.Add(-58 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: "w_badcmd", Account: "acme", KeyID: 1, Now: now, Deadline: now.Add(time.Hour),
		SealedCommand: e.seal("acme", "w_other", crypto.DirCommand, &automatorv1.Command{Script: "backup.sh"})}); err != nil {
		t.Fatal(err)
	}
	const unopened = "its stored result could not be opened (altered in the database?)"
	for _, key := range []string{"admin", "viewer"} {
		c := client(t)
		e.signIn(c, e.url, key)
		code, page := get(t, c, e.url+"/dashboard/work/w_altered")
		if code != http.StatusOK || !strings.Contains(page, unopened) || strings.Contains(page, "ran to the end") {
			t.Errorf("%s: the page of a unit whose result does not open: %d\n%s\nwant it saying %q", key, code, page, unopened)
		}
		code, list := get(t, c, e.url+"/dashboard/work")
		if code != http.StatusOK || !strings.Contains(list, unopened) {
			t.Errorf("%s: the work list: %d\n%s\nwant the unit's outcome %q", key, code, list, unopened)
		}
	}
	admin := client(t)
	e.signIn(admin, e.url, "admin")
	if code, page := get(t, admin, e.url+"/dashboard/work/w_badcmd"); code != http.StatusOK || !strings.Contains(page, "The stored command could not be opened (altered in the database?)") {
		t.Errorf("the page of a unit whose command does not open: %d\n%s", code, page)
	}
	if code, list := get(t, admin, e.url+"/dashboard/work"); code != http.StatusOK || !strings.Contains(list, "(unreadable: its stored command does not open)") {
		t.Errorf("the work list with a unit whose command does not open: %d\n%s\nwant its script cell saying so", code, list)
	}
}
