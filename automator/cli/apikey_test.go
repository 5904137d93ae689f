package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestAPIKeyNamesArePrintableCharactersCountedAsCharacters: `apikey create`
// takes a name of 1 to 64 printable characters, in any script (a name of
// 30 CJK characters is 90 bytes, and fits), and refuses, with its one-line
// reason and no key made, a name that is not valid UTF-8 or holds a
// character that is not printable: a C1 control such as U+009B, which a
// terminal reads as the start of an escape sequence, or a bidi override,
// which would show `apikey list` and `audit` lines other than they are.
func TestAPIKeyNamesArePrintableCharactersCountedAsCharacters(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	for _, name := range []string{"ci", "deploy key", strings.Repeat("日本語", 10), strings.Repeat("é", 64)} {
		if code, _, stderr := runMain(t, "apikey", "create", name, "--all-accounts", "--data-dir", dir); code != 0 {
			t.Errorf("apikey create %q: exit %d: %s", name, code, stderr)
		}
	}
	for _, name := range []string{"", "bad\xff", "x\u009b2Jy", "a\u202egnp.exe", "tab\there", strings.Repeat("é", 65)} {
		code, stdout, stderr := runMain(t, "apikey", "create", name, "--all-accounts", "--data-dir", dir)
		if code != ExitError || stdout != "" || !strings.Contains(stderr, "must be 1 to 64 printable characters") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("apikey create %q: exit %d, stdout %q, stderr %q; want exit %d and one line naming the rule", name, code, stdout, stderr, ExitError)
		}
	}
	_, list, _ := runMain(t, "apikey", "list", "--data-dir", dir)
	if n := strings.Count(list, "\n"); n != 1+1+4 { // header, init's admin key, the four above
		t.Errorf("apikey list has %d lines, want 6:\n%s", n, list)
	}
}

// TestInitRecordsTheAdminAPIKeyInTheAuditLog: the admin API key that
// `init` makes is a credential like those of `apikey create`, and the
// most powerful: the audit log records its creation, who made it and for
// which accounts, never its secret.
func TestInitRecordsTheAdminAPIKeyInTheAuditLog(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	secret, err := os.ReadFile(filepath.Join(dir, "admin.apikey"))
	if err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runMain(t, "audit", "--data-dir", dir, "--json")
	if code != 0 {
		t.Fatalf("audit: exit %d: %s", code, stderr)
	}
	var found bool
	for line := range strings.Lines(out) {
		var e auditJSON
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if e.Kind == "apikey.created" && strings.HasPrefix(e.Detail, "admin ") && strings.Contains(e.Detail, "every account") && strings.HasPrefix(e.Actor, "cli") {
			found = true
		}
	}
	if !found {
		t.Errorf("audit after init:\n%s\nwant an apikey.created event for the admin key, by the CLI", out)
	}
	if strings.Contains(out, strings.TrimSpace(string(secret))) {
		t.Errorf("audit after init holds the admin key's secret:\n%s", out)
	}
}

// TestAPIKeyCreateNamesEachAccountOnce: `apikey create --accounts
// acme,acme,globex` makes a key for acme and globex, each named once, in
// its listing, in its audit record and in what it says on stderr.
func TestAPIKeyCreateNamesEachAccountOnce(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	for _, a := range []string{"acme", "globex"} {
		if code, _, stderr := runMain(t, "account", "create", a, "--data-dir", dir); code != 0 {
			t.Fatalf("account create %s: exit %d: %s", a, code, stderr)
		}
	}
	code, _, stderr := runMain(t, "apikey", "create", "ci", "--accounts", "acme, acme,globex,acme", "--data-dir", dir)
	if code != 0 || !strings.Contains(stderr, "for account acme, globex;") {
		t.Fatalf("apikey create --accounts acme,acme,globex,acme: exit %d, stderr %q; want a key for account acme, globex", code, stderr)
	}
	_, list, _ := runMain(t, "apikey", "list", "--json", "--data-dir", dir)
	found := false
	for line := range strings.Lines(list) {
		var k struct {
			Name     string   `json:"name"`
			Accounts []string `json:"accounts"`
		}
		if err := json.Unmarshal([]byte(line), &k); err != nil {
			t.Fatalf("apikey list line %q: %v", line, err)
		}
		if k.Name == "ci" {
			found = true
			if strings.Join(k.Accounts, ",") != "acme,globex" {
				t.Errorf("apikey list: key ci has accounts %q, want [acme globex]", k.Accounts)
			}
		}
	}
	if !found {
		t.Fatalf("apikey list has no key ci:\n%s", list)
	}
	_, audit, _ := runMain(t, "audit", "--data-dir", dir)
	if !strings.Contains(audit, "(ci) for account acme, globex") {
		t.Errorf("audit:\n%s\nwant the key's creation for account acme, globex", audit)
	}
}

// TestAPIKeyRevokeOfANameNamesTheKeysID: apikey revoke takes a key's ID;
// given a key's name instead, it revokes nothing and says, in one line,
// which ID the key of that name has. An ID that is neither still says
// there is no such key.
func TestAPIKeyRevokeOfANameNamesTheKeysID(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	code, _, stderr := runMain(t, "apikey", "create", "ci", "--all-accounts", "--data-dir", dir)
	id := regexp.MustCompile(`ak_[0-9a-f]+`).FindString(stderr)
	if code != 0 || id == "" {
		t.Fatalf("apikey create ci: exit %d: %s", code, stderr)
	}
	code, stdout, stderr := runMain(t, "apikey", "revoke", "ci", "--data-dir", dir)
	want := `automator: no API key of ID "ci": apikey revoke takes the ID, and the key named "ci" is ` + id + "; see `automator apikey list --data-dir " + dir + "`\n"
	if code != ExitError || stderr != want || stdout != "" {
		t.Errorf("apikey revoke ci: exit %d, stdout %q, stderr %q; want %d and %q", code, stdout, stderr, ExitError, want)
	}
	if _, list, _ := runMain(t, "apikey", "list", "--data-dir", dir, "--json"); !strings.Contains(list, `"id":"`+id+`","name":"ci","all_accounts":true,"accounts":[],"created_at":`) ||
		!strings.Contains(list, `"revoked_at":null}`+"\n") || strings.Count(list, `"revoked_at":null`) != 2 {
		t.Errorf("apikey list after revoking a name:\n%s\nwant %s and admin unrevoked", list, id)
	}
	code, _, stderr = runMain(t, "apikey", "revoke", "ak_000000000000", "--data-dir", dir)
	if want := "automator: no API key of ID \"ak_000000000000\"; see `automator apikey list --data-dir " + dir + "`\n"; code != ExitError || stderr != want {
		t.Errorf("apikey revoke of an unknown ID: exit %d, stderr %q; want %d and %q", code, stderr, ExitError, want)
	}
}

// TestAPIKeyCreateNamesEveryBadAccountAtOnce: --accounts naming several
// accounts that are not names, or that do not exist, is refused in one
// line naming each of them, not the first only (which would take a run per
// mistake to find them all); no key is made. The command it names to make
// a missing account runs as printed (it once lacked the account's name and
// --data-dir).
func TestAPIKeyCreateNamesEveryBadAccountAtOnce(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	if code, _, stderr := runMain(t, "account", "create", "acme", "--data-dir", dir); code != 0 {
		t.Fatalf("account create acme: exit %d: %s", code, stderr)
	}
	for _, c := range []struct{ accounts, want string }{
		{"acme,Bad,,x\ty", `automator: --accounts: "Bad", "" and "x\ty" are not account names (^[a-z0-9][a-z0-9._-]{0,62}$)` + "\n"},
		{"nobody,acme,ghost", "automator: --accounts: accounts \"nobody\" and \"ghost\" not found; create them first (`automator account create NAME --data-dir " + dir + "` for each)\n"},
		{"acme,nobody", "automator: --accounts: account \"nobody\" not found; create it first (`automator account create nobody --data-dir " + dir + "`)\n"},
		// One too long to read is quoted cut, with its length.
		{"acme," + strings.Repeat("X", 300), `automator: --accounts: "` + strings.Repeat("X", 80) + `"… (300 bytes) is not an account name (^[a-z0-9][a-z0-9._-]{0,62}$)` + "\n"},
	} {
		code, stdout, stderr := runMain(t, "apikey", "create", "ci", "--accounts", c.accounts, "--data-dir", dir)
		if code != ExitError || stderr != c.want || stdout != "" {
			t.Errorf("apikey create --accounts %q: exit %d, stdout %q, stderr %q; want %d and %q", c.accounts, code, stdout, stderr, ExitError, c.want)
		}
	}
	if _, list, _ := runMain(t, "apikey", "list", "--data-dir", dir); strings.Contains(list, "ci") {
		t.Errorf("apikey list after refused creations:\n%s\nwant no key ci", list)
	}
	// The one account missing: the command named runs as printed, and the
	// key is made after it.
	_, _, stderr := runMain(t, "apikey", "create", "ci", "--accounts", "acme,nobody", "--data-dir", dir)
	if hint := hintCommand(stderr); hint == nil {
		t.Errorf("apikey create --accounts of a missing account: stderr %q names no command", stderr)
	} else if code, _, herr := runMain(t, hint...); code != 0 {
		t.Errorf("%q printed; that command run as printed: exit %d: %s", stderr, code, herr)
	} else if code, _, herr := runMain(t, "apikey", "create", "ci2", "--accounts", "acme,nobody", "--data-dir", dir); code != 0 {
		t.Errorf("apikey create --accounts acme,nobody once nobody was made: exit %d: %s", code, herr)
	}
}

// TestAnOverLongAccountNameIsQuotedCut: a NAME too long to read is quoted
// in the error that refuses it, but no more than its first 80 bytes, with
// its length.
func TestAnOverLongAccountNameIsQuotedCut(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	code, _, stderr := runMain(t, "account", "create", strings.Repeat("X", 300), "--data-dir", dir)
	if want := `automator: account name "` + strings.Repeat("X", 80) + `"… (300 bytes) must match`; code != ExitError || !strings.HasPrefix(stderr, want) {
		t.Errorf("account create of a 300-byte name: exit %d, stderr %q; want %d, beginning %q", code, stderr, ExitError, want)
	}
}
