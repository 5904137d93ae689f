package cli

import (
	"bytes"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// listBase is when the seeded units were queued; listNow is the listings'
// clock.
var (
	listBase = time.Date(2026, 1, 2, 3, 4, 5, 678000000, time.UTC)
	listNow  = listBase.Add(10 * time.Minute)
)

// seedListings makes a data directory whose store holds four accounts,
// their instances and units of work in every state, all at fixed times,
// sealed with the real account keys.
func seedListings(t *testing.T) string {
	t.Helper()
	dir := initDir(t)
	ctx := t.Context()
	master, err := crypto.ReadMasterKeyFile(filepath.Join(dir, config.FileMasterKey))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := openDirStore(t, dir)
	defer st.Close()
	keys := map[string]crypto.Key{}
	for _, name := range []string{"acme", "globex", "initech", "stark"} {
		k, err := crypto.NewKey(1)
		if err != nil {
			t.Fatal(err)
		}
		sealed, err := master.SealKey(name, k)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.AccountCreate(ctx, store.AccountCreateParams{Name: name, TokenHash: []byte("token of " + name), KeyID: k.ID, SealedKey: sealed, Now: listBase}); err != nil {
			t.Fatal(err)
		}
		keys[name] = k
	}
	at := func(d time.Duration) time.Time { return listBase.Add(d) }
	seal := func(account, id string, dir crypto.Direction, m proto.Message) []byte {
		t.Helper()
		plain, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		blob, err := crypto.Seal(keys[account], account, id, dir, plain)
		if err != nil {
			t.Fatal(err)
		}
		return blob
	}
	enqueue := func(id, account string, queued, deadline time.Time, script string, args ...string) {
		t.Helper()
		if _, err := st.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: id, Account: account, KeyID: 1, Now: queued, Deadline: deadline,
			SealedCommand: seal(account, id, crypto.DirCommand, &automatorv1.Command{Script: script, Args: args})}); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(account, instance string, when time.Time) store.Work {
		t.Helper()
		ws, err := st.WorkClaim(ctx, store.WorkClaimParams{Account: account, InstanceID: instance, Max: 1, ClaimIDs: []string{"c-" + instance}, Now: when})
		if err != nil || len(ws) != 1 {
			t.Fatalf("claim by %s: %v, %v", instance, ws, err)
		}
		return ws[0]
	}
	complete := func(w store.Work, state store.State, res *automatorv1.Result, reason string, when time.Time) {
		t.Helper()
		if _, err := st.WorkComplete(ctx, store.WorkCompleteParams{ID: w.ID, ClaimID: w.ClaimID, State: state, Reason: reason, Now: when,
			SealedResult: seal(w.Account, w.ID, crypto.DirResult, res)}); err != nil {
			t.Fatal(err)
		}
	}
	later := at(time.Hour)

	enqueue("w_01", "acme", at(0), later, "backup.sh", "--full", "/srv/data")
	complete(claim("acme", "host-a", at(20*time.Millisecond)), store.StateSucceeded,
		&automatorv1.Result{ExitCode: 0, Stdout: []byte("backed up 3 files\n")}, "", at(1320*time.Millisecond))
	enqueue("w_02", "acme", at(1*time.Second), later, "report.sh")
	complete(claim("acme", "host-b", at(1015*time.Millisecond)), store.StateSucceeded,
		&automatorv1.Result{ExitCode: 3, Stdout: []byte("partial\xff"), Stderr: []byte("disk full\n")}, "", at(3*time.Second)) // its stdout not UTF-8
	enqueue("w_03", "acme", at(2*time.Second), later, "nope.sh")
	complete(claim("acme", "host-a", at(2030*time.Millisecond)), store.StateFailed,
		&automatorv1.Result{Failure: `script "nope.sh" is not in the scripts directory`}, "the proxy could not run the command", at(2040*time.Millisecond))
	enqueue("w_04", "acme", at(3*time.Second), at(63*time.Second), "sleep.sh", "600")
	claim("acme", "host-a", at(3010*time.Millisecond))
	enqueue("w_05", "globex", at(4*time.Second), at(64*time.Second), "inventory.sh")
	if _, err := st.WorkExpire(ctx, store.WorkExpireParams{Now: at(2 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	enqueue("w_06", "acme", at(5*time.Second), later, "deploy.sh", "v2")
	if _, err := st.WorkCancel(ctx, store.WorkCancelParams{ID: "w_06", Reason: "cancelled by the caller with API key admin", Now: at(6 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	enqueue("w_07", "acme", at(9*time.Minute), later, "backup.sh", "--incremental")
	claim("acme", "host-b", at(9*time.Minute+25*time.Millisecond))
	enqueue("w_08", "acme", at(9*time.Minute+30*time.Second), later, "report.sh")
	enqueue("w_09", "globex", at(8*time.Minute), later, "inventory.sh")

	// IN FLIGHT counts the units each holds claimed (host-b: w_07), not
	// what each said it ran when it last polled (Running).
	for _, in := range []store.InstanceSeenParams{
		{Account: "acme", InstanceID: "host-a", Hostname: "a.acme.internal", Version: "v1.4.0", Running: 2, Now: listNow.Add(-5 * time.Second)},
		{Account: "acme", InstanceID: "host-b", Hostname: "b.acme.internal", Version: "v1.4.0", Running: 0, Now: listNow.Add(-2 * time.Second)},
		{Account: "acme", InstanceID: "host-c", Hostname: "c.acme.internal", Version: "v1.3.2", Running: 1, Now: listNow.Add(-10 * time.Minute)},
		// host-d was stopped gracefully 3 s ago: stopped, not online.
		{Account: "acme", InstanceID: "host-d", Hostname: "d.acme.internal", Version: "v1.4.0", Stopping: true, Now: listNow.Add(-3 * time.Second)},
		// host-e, still on the profile of before a rotate-key --overlap 0,
		// polls and is refused: refused, not online.
		{Account: "acme", InstanceID: "host-e", Hostname: "e.acme.internal", Version: "v1.4.0", RefusedKeyIDs: []uint32{1}, Now: listNow.Add(-4 * time.Second)},
		// host-f's last poll, long ago, was refused: offline, and said so.
		{Account: "acme", InstanceID: "host-f", Hostname: "f.acme.internal", Version: "v1.3.2", RefusedKeyIDs: []uint32{1, 2}, Now: listNow.Add(-20 * time.Minute)},
		// host-g still runs the whole profile of before a rotate-key whose
		// overlap has ended: its polls are refused for its expired token.
		{Account: "acme", InstanceID: "host-g", Hostname: "g.acme.internal", Version: "v1.4.0", TokenExpired: true, Now: listNow.Add(-6 * time.Second)},
		// host-h's last poll, long ago, was refused for its expired token.
		{Account: "acme", InstanceID: "host-h", Hostname: "h.acme.internal", Version: "v1.3.2", TokenExpired: true, Now: listNow.Add(-30 * time.Minute)},
		{Account: "globex", InstanceID: "g-1", Hostname: "g1.globex.lan", Version: "v1.4.0", Running: 0, Now: listNow.Add(-9 * time.Minute)},
		// g-2 polls and is refused: globex, with a unit queued and no
		// instance online, is stranded, and says why.
		{Account: "globex", InstanceID: "g-2", Hostname: "g2.globex.lan", Version: "v1.4.0", RefusedKeyIDs: []uint32{1}, Now: listNow.Add(-7 * time.Second)},
		// stark's only instances poll and are refused, nothing queued: the
		// account is refused, not offline.
		{Account: "stark", InstanceID: "s-1", Hostname: "s1.stark.lan", Version: "v1.4.0", RefusedKeyIDs: []uint32{1}, Now: listNow.Add(-1 * time.Second)},
		{Account: "stark", InstanceID: "s-2", Hostname: "s2.stark.lan", Version: "v1.4.0", RefusedKeyIDs: []uint32{1}, Now: listNow.Add(-3 * time.Second)},
	} {
		if err := st.InstanceSeen(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// golden compares got with testdata/NAME (rewritten with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s (run with -update to write it): %v", path, err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (run with -update if the change is right)\n---- got ----\n%s---- want ----\n%s", path, got, want)
	}
}

// listCLI runs a listing command at listNow and returns its stdout.
func listCLI(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := Main(t.Context(), args, Env{Stdout: &out, Stderr: &errb}); code != 0 {
		t.Fatalf("automator %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
	}
	return out.String()
}

// TestListingsPrintTablesAndJSON checks every listing against its golden
// output, for people (tables) and scripts (--json).
func TestListingsPrintTablesAndJSON(t *testing.T) {
	dir := seedListings(t)
	now = func() time.Time { return listNow }
	t.Cleanup(func() { now = time.Now })
	for _, c := range []struct {
		golden string
		args   []string
	}{
		{"account-list.txt", []string{"account", "list"}},
		{"account-list.json", []string{"account", "list", "--json"}},
		{"instances-acme.txt", []string{"instances", "--account", "acme"}},
		{"instances-acme.json", []string{"instances", "--account", "acme", "--json"}},
		{"instances-initech.txt", []string{"instances", "--account", "initech"}},
		{"work-list.txt", []string{"work", "list"}},
		{"work-list.json", []string{"work", "list", "--json"}},
		{"work-list-acme-succeeded.txt", []string{"work", "list", "--account", "acme", "--state", "succeeded"}},
		{"work-list-limit-2.txt", []string{"work", "list", "--limit", "2"}},
		{"work-show-w_02.txt", []string{"work", "show", "w_02"}},
		{"work-show-w_02-reveal.txt", []string{"work", "show", "w_02", "--reveal"}},
		{"work-show-w_01-reveal.txt", []string{"work", "show", "w_01", "--reveal"}},
		{"work-show-w_03-reveal.json", []string{"work", "show", "w_03", "--reveal", "--json"}},
		// A stream that is not UTF-8 is null as text, exact in base64.
		{"work-show-w_02-reveal.json", []string{"work", "show", "w_02", "--reveal", "--json"}},
		{"work-show-w_05.txt", []string{"work", "show", "w_05"}},
	} {
		t.Run(c.golden, func(t *testing.T) {
			golden(t, c.golden, listCLI(t, append(c.args, "--data-dir", dir)...))
		})
	}
}

// TestAccountListShowsTheAccountsBeingDeleted: `account list` shows an
// account whose deletion is unfinished, with the units it has left to
// move, after the table of the others (byte for byte as without it), and
// in --json among them, in name order, with status "deleting".
func TestAccountListShowsTheAccountsBeingDeleted(t *testing.T) {
	dir := seedListings(t)
	unfinishedDeletion(t, dir, "hooli", listBase.Add(time.Minute))
	now = func() time.Time { return listNow }
	t.Cleanup(func() { now = time.Now })
	out := listCLI(t, "account", "list", "--data-dir", dir)
	golden(t, "account-list-deleting.txt", out)
	if others, err := os.ReadFile(filepath.Join("testdata", "account-list.txt")); err != nil || !strings.HasPrefix(out, string(others)) {
		t.Errorf("the table of the other accounts differs from account-list.txt (%v)", err)
	}
	golden(t, "account-list-deleting.json", listCLI(t, "account", "list", "--json", "--data-dir", dir))
}

func TestListingErrorsNameTheFlag(t *testing.T) {
	t.Parallel()
	dir := seedListings(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"instances", "--account", "nobody"}, `--account: there is no account "nobody"`},
		{[]string{"work", "list", "--account", "nobody"}, `--account: there is no account "nobody"`},
		{[]string{"instances"}, "--account is required"},
		{[]string{"work", "list", "--state", "done"}, `--state "done" is not a state`},
		{[]string{"work", "list", "--limit", "0"}, "--limit 0 is outside"},
		{[]string{"work", "show", "w_nope"}, `showing work "w_nope": not a work id`},
		{[]string{"work", "show", "w_ffffffffffffffffffffffffffffffff"}, `there is no unit of work "w_ffffffffffffffffffffffffffffffff"`},
		{[]string{"work", "frobnicate"}, `unknown work command "frobnicate"`},
	} {
		var out, errb bytes.Buffer
		code := Main(t.Context(), append(c.args, "--data-dir", dir), Env{Stdout: &out, Stderr: &errb})
		if code != ExitError || !strings.Contains(errb.String(), c.want) {
			t.Errorf("automator %s: exit %d, stderr %q; want exit %d and %q", strings.Join(c.args, " "), code, errb.String(), ExitError, c.want)
		}
	}
	// Without --data-dir the listings say what they need.
	var out, errb bytes.Buffer
	if code := Main(t.Context(), []string{"account", "list"}, Env{Stdout: &out, Stderr: &errb}); code != ExitError || !strings.Contains(errb.String(), "--data-dir is required") {
		t.Errorf("account list without --data-dir: exit %d, stderr %q", code, errb.String())
	}
}

// TestWorkShowSaysAMalformedIDIsMalformed: an id that is not the shape of
// a work id (an empty one, one with a control character, quoted) gets one
// line saying so, as work wait and work cancel word it, rather than that
// there is no such unit; an id of the right shape that names no unit
// still says there is none. Both exit 255, as for any bad argument.
func TestWorkShowSaysAMalformedIDIsMalformed(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	for _, id := range []string{"not-an-id", "", "w_0123456789abcdef0123456789abcde\n", "W_0123456789abcdef0123456789abcdef"} {
		code, out, stderr := runCLI(t, "work", "show", id, "--data-dir", dir)
		want := fmt.Sprintf("automator: showing work %q: %s\n", id, notAWorkID)
		if code != ExitError || stderr != want || out != "" {
			t.Errorf("work show %q: exit %d, stdout %q, stderr %q; want %d and %q", id, code, out, stderr, ExitError, want)
		}
	}
	const unknown = "w_0123456789abcdef0123456789abcdef"
	code, _, stderr := runCLI(t, "work", "show", unknown, "--data-dir", dir)
	if code != ExitError || stderr != `automator: there is no unit of work "`+unknown+`"`+"\n" {
		t.Errorf("work show of an unknown id: exit %d, stderr %q; want %d and one line saying there is no such unit", code, stderr, ExitError)
	}
}

// TestWorkListRefusesAnEmptyAccountOrState: --account "" or --state ""
// (a script's variable left empty) is refused in one line naming the flag,
// rather than taken as no filter and every unit listed.
func TestWorkListRefusesAnEmptyAccountOrState(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	for _, flag := range []string{"--account", "--state"} {
		code, out, stderr := runCLI(t, "work", "list", flag, "", "--data-dir", dir)
		want := "automator: " + flag + " is empty; leave it out to list units of every "
		if code != ExitError || !strings.HasPrefix(stderr, want) || strings.Count(stderr, "\n") != 1 || out != "" {
			t.Errorf("work list %s \"\": exit %d, stdout %q, stderr %q; want %d and one line starting %q", flag, code, out, stderr, ExitError, want)
		}
	}
}

// TestAUnitWhoseSealedBlobsDoNotOpenIsListedAndMarked: with one unit's
// stored result and another's command altered in the database, work list
// lists every unit and marks those two; work show --reveal shows the unit
// whose result does not open with its command, and says what does not
// open, rather than failing.
func TestAUnitWhoseSealedBlobsDoNotOpenIsListedAndMarked(t *testing.T) {
	t.Parallel()
	dir := seedListings(t)
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+cfg.DBPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	// The last byte of each blob changed (to 0, or 1 where it was 0: set
	// to 0 alone, a blob ending in 0, one run in 256, stayed as it was).
	for _, q := range []string{
		`UPDATE work SET sealed_result = CAST(substr(sealed_result, 1, length(sealed_result) - 1) || CASE WHEN substr(sealed_result, -1) = x'00' THEN x'01' ELSE x'00' END AS BLOB) WHERE id = 'w_02'`,
		`UPDATE work SET sealed_command = CAST(substr(sealed_command, 1, length(sealed_command) - 1) || CASE WHEN substr(sealed_command, -1) = x'00' THEN x'01' ELSE x'00' END AS BLOB) WHERE id = 'w_08'`,
		// A failed unit set to succeeded: its result, which opens, says
		// the proxy could not run the command.
		`UPDATE work SET state = 'succeeded', reason = '' WHERE id = 'w_03'`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "work", "list", "--data-dir", dir, "--json")
	if code != 0 {
		t.Fatalf("work list with an altered result: exit %d, stderr %q", code, stderr)
	}
	for _, id := range []string{"w_01", "w_02", "w_03", "w_05", "w_09"} {
		if !strings.Contains(stdout, `"work_id": "`+id+`"`) {
			t.Errorf("work list left out %s: %s", id, stdout)
		}
	}
	if !strings.Contains(stdout, `"problem": "its stored result does not open (altered in the database?): `) {
		t.Errorf("work list does not mark the unit whose result does not open: %s", stdout)
	}
	code, stdout, stderr = runCLI(t, "work", "show", "w_02", "--data-dir", dir, "--reveal")
	if code != 0 || !strings.Contains(stdout, "its stored result does not open") || !strings.Contains(stdout, "report.sh") {
		t.Errorf("work show --reveal of a unit whose result does not open: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "work", "show", "w_08", "--data-dir", dir, "--reveal")
	if code != 0 || !strings.Contains(stdout, "its stored command does not open") {
		t.Errorf("work show --reveal of a unit whose command does not open: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, stderr = runCLI(t, "work", "show", "w_03", "--data-dir", dir, "--json")
	if code != 0 || !strings.Contains(stdout, `"problem": "it is recorded succeeded, but its sealed result says its proxy could not run the command (altered in the database? its outcome is unknown)"`) || strings.Contains(stdout, `"exit_code"`) {
		t.Errorf("work show of a failed unit set to succeeded in the database: exit %d, stdout %q, stderr %q; want the contradiction as its problem, and no exit code", code, stdout, stderr)
	}
}
