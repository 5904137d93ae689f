package dashboard_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
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
		if code, unit := get(t, admin, e.url+"/dashboard/work/"+id); code != http.StatusOK || !strings.Contains(unit, "acme (deleted ") || strings.Contains(unit, "backup.sh") {
			t.Errorf("the page of unit %s of a deleted account: %d\n%s", id, code, unit)
		}
	}
	if code, accounts := get(t, admin, e.url+"/dashboard/"); code != http.StatusOK || strings.Contains(accounts, `data-account="acme"`) || !strings.Contains(accounts, `data-account="globex"`) {
		t.Errorf("accounts page after acme's deletion: %d\n%s\nwant globex only", code, accounts)
	}
}
