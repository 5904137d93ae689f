package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
	"github.com/opsgate/opsgate/crypto"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// run runs one automator command in this process.
func runMain(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(t.Context(), args, Env{Stdout: &out, Stderr: &errb})
	return code, out.String(), errb.String()
}

// TestAccountDeleteFromADataDirectory: `account delete` says what it did,
// records it, and leaves the account's units listed (under the deleted
// name) but unreadable for good; deleting it again, or a bad name, is one
// precise line; the name can be used again.
func TestAccountDeleteFromADataDirectory(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	code, profile, stderr := runMain(t, "account", "create", "acme", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("account create acme: exit %d: %s", code, stderr)
	}
	if code, _, stderr := runMain(t, "account", "create", "globex", "--data-dir", dir); code != 0 {
		t.Fatalf("account create globex: exit %d: %s", code, stderr)
	}
	for _, a := range [][]string{{"ci", "--accounts", "acme"}, {"both", "--accounts", "acme,globex"}, {"all", "--all-accounts"}} {
		if code, _, stderr := runMain(t, append([]string{"apikey", "create", a[0], "--data-dir", dir}, a[1:]...)...); code != 0 {
			t.Fatalf("apikey create %s: exit %d: %s", a[0], code, stderr)
		}
	}

	// A unit that ran (its sealed result has an exit code) and one queued.
	key, err := crypto.ParseKey(regexp.MustCompile(`(?m)^key: (\S+)$`).FindStringSubmatch(profile)[1])
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlitestore.Open(t.Context(), filepath.Join(dir, "automator.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	seal := func(id string, dir crypto.Direction, m proto.Message) []byte {
		plain, _ := proto.Marshal(m)
		b, err := crypto.Seal(key, "acme", id, dir, plain)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	now := time.Now()
	for _, id := range []string{"w_ran", "w_queued"} {
		if _, err := st.WorkEnqueue(t.Context(), store.WorkEnqueueParams{ID: id, Account: "acme", KeyID: key.ID,
			SealedCommand: seal(id, crypto.DirCommand, &automatorv1.Command{Script: "hello.sh"}), Now: now, Deadline: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if id == "w_ran" {
			ws, err := st.WorkClaim(t.Context(), store.WorkClaimParams{Account: "acme", InstanceID: "host-a", Max: 1, ClaimIDs: []string{"c1"}, Now: now})
			if err != nil || len(ws) != 1 {
				t.Fatalf("claim: %v, %v", ws, err)
			}
			if _, err := st.WorkComplete(t.Context(), store.WorkCompleteParams{ID: id, ClaimID: "c1", State: store.StateSucceeded,
				SealedResult: seal(id, crypto.DirResult, &automatorv1.Result{ExitCode: 3}), Now: now}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if code, out, stderr := runMain(t, "work", "show", "w_ran", "--data-dir", dir, "--reveal"); code != 0 || !strings.Contains(out, "hello.sh") {
		t.Fatalf("work show --reveal before the deletion: exit %d: %s%s", code, out, stderr)
	}

	code, out, stderr := runMain(t, "account", "delete", "acme", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("account delete acme: exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		`account "acme" deleted`,
		"units cancelled (queued or claimed): 1\n",
		`units kept until the purge, listed as "acme (deleted `,
		"unreadable for good: 2\n",
		"API keys revoked (they could use only acme): ak_",
		"API keys that no longer name acme (they keep their other accounts): ak_",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("account delete printed:\n%s\nwant it to say %q", out, want)
		}
	}

	code, _, stderr = runMain(t, "account", "delete", "acme", "--data-dir", dir)
	if code != ExitError || stderr != "automator: account \"acme\" not found; see `automator account list --data-dir "+dir+"`\n" {
		t.Errorf("account delete of a deleted account: exit %d, stderr %q; want %d and one line saying it is not found", code, stderr, ExitError)
	}
	code, _, stderr = runMain(t, "account", "delete", "Not_A_Name", "--data-dir", dir)
	if code != ExitError || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "Not_A_Name") {
		t.Errorf("account delete of a bad name: exit %d, stderr %q; want %d and one line naming it", code, stderr, ExitError)
	}

	if _, out, _ := runMain(t, "account", "list", "--data-dir", dir); strings.Contains(out, "acme") || !strings.Contains(out, "globex") {
		t.Errorf("account list after the deletion:\n%s\nwant globex only", out)
	}
	code, out, stderr = runMain(t, "work", "list", "--data-dir", dir)
	if code != 0 || strings.Count(out, "acme (deleted ") != 2 || !strings.Contains(out, "account \"acme\" was deleted") {
		t.Errorf("work list after the deletion: exit %d: %s%s\nwant both units, under the deleted account, the queued one cancelled saying why", code, out, stderr)
	}
	if code, out, stderr := runMain(t, "work", "show", "w_ran", "--data-dir", dir); code != 0 || !strings.Contains(out, "succeeded") {
		t.Errorf("work show of a unit of the deleted account: exit %d: %s%s", code, out, stderr)
	}
	code, _, stderr = runMain(t, "work", "show", "w_ran", "--data-dir", dir, "--reveal")
	if code != ExitError || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, `account "acme": the account was deleted and its key destroyed`) {
		t.Errorf("work show --reveal of a unit of the deleted account: exit %d, stderr %q; want one line saying its account was deleted", code, stderr)
	}
	if _, out, _ := runMain(t, "audit", "--data-dir", dir); !regexp.MustCompile(`account\.deleted .*account=acme .*1 units cancelled, 2 kept`).MatchString(out) {
		t.Errorf("audit after the deletion:\n%s\nwant an account.deleted event", out)
	}

	code, profile, stderr = runMain(t, "account", "create", "acme", "--data-dir", dir)
	if code != 0 || strings.Contains(profile, key.String()) {
		t.Fatalf("account create acme again: exit %d: %s; want a new profile with a new key", code, stderr)
	}
	if _, out, _ := runMain(t, "work", "list", "--data-dir", dir, "--account", "acme"); strings.Contains(out, "w_") {
		t.Errorf("work list --account acme of the new account lists the old one's units:\n%s", out)
	}
}

// TestAccountDeleteHelp: `account delete --help` shows its form and flag.
func TestAccountDeleteHelp(t *testing.T) {
	t.Parallel()
	code, out, stderr := runMain(t, "account", "delete", "--help")
	if code != 0 || stderr != "" || !strings.Contains(out, "automator account delete NAME --data-dir DIR") || !strings.Contains(out, "--data-dir") {
		t.Fatalf("account delete --help: exit %d, stderr %q, stdout:\n%s", code, stderr, out)
	}
	if strings.Contains(out, "account create") {
		t.Errorf("account delete --help shows other commands' forms:\n%s", out)
	}
}

// unfinishedDeletion makes account name in dir with 150 ended units, more
// than a batch, and deletes it at at, stopping the deletion before any of
// them moved under its tombstone (as Ctrl+C would stop `account delete`).
func unfinishedDeletion(t *testing.T, dir, name string, at time.Time) store.AccountDeletion {
	t.Helper()
	if code, _, stderr := runMain(t, "account", "create", name, "--data-dir", dir); code != 0 {
		t.Fatalf("account create %s: exit %d: %s", name, code, stderr)
	}
	path := filepath.Join(dir, "automator.db")
	execSQLite(t, path, `INSERT INTO work (id, account, state, key_id, sealed_command, queued_at, deadline, finished_at)
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 150)
SELECT 'w' || i, '`+name+`', 'succeeded', 1, randomblob(64), i, i + 1000, i + 1 FROM n`)
	st, err := sqlitestore.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	stop, cancel := context.WithCancel(t.Context())
	defer cancel()
	d, err := st.AccountDelete(stop, store.AccountDeleteParams{Name: name, Now: at,
		Moving: func(store.AccountDeletion, int) { cancel() }})
	if !errors.Is(err, store.ErrDeletionUnfinished) {
		t.Fatalf("AccountDelete stopped before its first batch: %v, want ErrDeletionUnfinished", err)
	}
	return d
}

// TestAnUnfinishedAccountDeletionIsFinishedByDeletingAgain: an account
// whose deletion stopped before its units moved under its tombstone
// (SQLite moves more than a batch of them after the deletion commits)
// keeps its name taken: `account create` says why and what to run;
// `account delete` run again moves them, says so, and frees the name.
func TestAnUnfinishedAccountDeletionIsFinishedByDeletingAgain(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	d := unfinishedDeletion(t, dir, "acme", time.Now())
	tomb := d.Tombstone

	// Run again, and stopped again (as by Ctrl+C) once it says it moves
	// the units: it says so, not that the name is free.
	stopAgain, cancelAgain := context.WithCancel(t.Context())
	defer cancelAgain()
	var againOut, errb bytes.Buffer
	code := Main(stopAgain, []string{"account", "delete", "acme", "--data-dir", dir},
		Env{Stdout: &againOut, Stderr: writerFunc(func(b []byte) (int, error) {
			if bytes.Contains(b, []byte("moving its")) {
				cancelAgain()
			}
			return errb.Write(b)
		})})
	if code != 0 || !strings.Contains(errb.String(), "the deletion stands, but it stopped") || strings.Contains(againOut.String(), "free") {
		t.Errorf("account delete run again and stopped: exit %d, stdout %q, stderr %q; want 0, saying it stopped, not that the name is free", code, againOut.String(), errb.String())
	}

	code, _, stderr := runMain(t, "account", "create", "acme", "--data-dir", dir)
	if want := "automator account delete acme --data-dir " + dir + "` again to finish"; code != ExitError || !strings.Contains(stderr, "still being deleted") || !strings.Contains(stderr, want) {
		t.Errorf("account create of a name being deleted: exit %d, stderr %q; want %d saying it is still being deleted and to run %q", code, stderr, ExitError, want)
	}
	code, out, stderr := runMain(t, "account", "delete", "acme", "--data-dir", dir)
	if want := `account "acme" was deleted at ` + d.DeletedAt.UTC().Format(time.RFC3339) + ` already; its last 150 units are now kept as "` + tomb + `" too, and the name is free`; code != 0 || !strings.Contains(out, want) {
		t.Errorf("account delete of an account being deleted: exit %d, stdout %q, stderr %q; want %q", code, out, stderr, want)
	}
	if want := `moving its 150 ended units under "` + tomb + `"`; !strings.Contains(stderr, want) {
		t.Errorf("account delete of an account being deleted: stderr %q; want it to say it is %s", stderr, want)
	}
	if code, _, stderr := runMain(t, "account", "create", "acme", "--data-dir", dir); code != 0 {
		t.Errorf("account create once the deletion is finished: exit %d: %s", code, stderr)
	}
	if code, out, stderr := runMain(t, "work", "list", "--account", "acme", "--data-dir", dir); code != 0 || strings.Contains(out, "w3") {
		t.Errorf("work list --account acme (the new account): exit %d, stdout %q, stderr %q; want none of the old units", code, out, stderr)
	}
}

// writerFunc is an io.Writer made of a function.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// TestAnAccountDeletionFinishedByDeletingAgainIsAudited: `account delete`
// run again on a deletion left unfinished records, besides the deletion's
// own account.deleted, an account.deletion_finished of its own: by the
// command, naming the account, its tombstone and the units it moved.
func TestAnAccountDeletionFinishedByDeletingAgainIsAudited(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	d := unfinishedDeletion(t, dir, "acme", time.Now())
	if code, _, stderr := runMain(t, "account", "delete", "acme", "--data-dir", dir); code != 0 {
		t.Fatalf("account delete of an account being deleted: exit %d: %s", code, stderr)
	}
	code, out, stderr := runMain(t, "audit", "--data-dir", dir, "--json")
	if code != 0 {
		t.Fatalf("audit: exit %d: %s", code, stderr)
	}
	var finished []auditJSON
	for line := range strings.Lines(out) {
		var e auditJSON
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if e.Kind == store.AuditAccountDeletionFinished {
			finished = append(finished, e)
		}
	}
	want := fmt.Sprintf("finished a deletion left unfinished: 150 more units moved under %q; the name is free", d.Tombstone)
	if len(finished) != 1 || finished[0].Account != "acme" || !strings.HasPrefix(finished[0].Actor, "cli") || finished[0].Detail != want {
		t.Errorf("account.deletion_finished events: %+v; want one for acme, by the command, %q", finished, want)
	}
}
