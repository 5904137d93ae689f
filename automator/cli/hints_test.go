package cli

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/config"
)

// hintCommand is the command a message names to run, between backticks,
// as the arguments of Main (without "automator"); nil when it names none.
func hintCommand(msg string) []string {
	m := regexp.MustCompile("`automator ([^`]*)`").FindStringSubmatch(msg)
	if m == nil {
		return nil
	}
	return strings.Fields(m[1])
}

// TestHintsOfUnknownIDsAndAccountsRunAsPrinted: a command given an
// unknown API key id or account names the command that lists them; run
// as printed it works. It once lacked --data-dir, which the listing
// requires as the command that printed it did, and was refused. A DSN
// given with --db is not repeated (it may hold a password): the hint says
// to give it again.
func TestHintsOfUnknownIDsAndAccountsRunAsPrinted(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	for _, args := range [][]string{
		{"apikey", "revoke", "ak_nope", "--data-dir", dir},
		{"account", "delete", "nope", "--data-dir", dir},
		{"account", "rotate-token", "nope", "--data-dir", dir},
		{"account", "rotate-key", "nope", "--data-dir", dir},
		{"instances", "--account", "nope", "--data-dir", dir},
		{"work", "list", "--account", "nope", "--data-dir", dir},
	} {
		code, _, stderr := runCLI(t, args...)
		hint := hintCommand(stderr)
		if code == 0 || hint == nil {
			t.Errorf("%v: exit %d, stderr %q; want a refusal naming the command that lists what exists", args, code, stderr)
			continue
		}
		if code, _, herr := runCLI(t, hint...); code != 0 {
			t.Errorf("%v printed %q; that command run as printed: exit %d: %s", args, stderr, code, herr)
		}
	}

	dsn := filepath.Join(dir, config.FileDB)
	_, _, stderr := runCLI(t, "work", "list", "--account", "nope", "--data-dir", dir, "--db", dsn)
	if want := "`automator account list --data-dir " + dir + "` lists them (with the same --db)"; !strings.Contains(stderr, want) || strings.Contains(stderr, dsn) {
		t.Errorf("work list --db DSN of an unknown account: stderr %q; want %q, without the DSN", stderr, want)
	}
}

// TestServesWarningOfAnUnknownRevealKeyNamesAListingThatRunsAsPrinted:
// serve's warning that dashboard_reveal_keys names no API key names the
// listing of the keys with its --data-dir; run as printed, it works.
func TestServesWarningOfAnUnknownRevealKeyNamesAListingThatRunsAsPrinted(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	st, err := openDataStore(t.Context(), dir, "")
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	warnUnknownRevealKeys(t.Context(), st, []string{"ak_nope"}, dir, "", slog.New(slog.NewTextHandler(&log, nil)))
	st.Close()
	hint := hintCommand(log.String())
	if hint == nil {
		t.Fatalf("the warning of an unknown reveal key names no command:\n%s", log.String())
	}
	if code, _, stderr := runCLI(t, hint...); code != 0 {
		t.Errorf("the warning %q names a command that, run as printed, exits %d: %s", log.String(), code, stderr)
	}
}

// TestServesWarningOfAnUnknownRevealKeyCarriesItsDB: serve given --db
// (overriding automator.yaml's db) names, in its warning that
// dashboard_reveal_keys names no API key, the listing of the keys "(with
// the same --db)", without the DSN, which may hold a password; run with
// that --db, the listing shows that database's keys, not automator.yaml's.
func TestServesWarningOfAnUnknownRevealKeyCarriesItsDB(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	other := takeBackup(t, dir) // a database of its own, as serve --db names
	if code, _, stderr := runCLI(t, "apikey", "create", "only-in-yaml-db", "--all-accounts", "--data-dir", dir); code != 0 {
		t.Fatalf("apikey create: exit %d: %s", code, stderr)
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DB = other
	st, err := openStore(t.Context(), dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	warnUnknownRevealKeys(t.Context(), st, []string{"ak_nope"}, dir, other, slog.New(slog.NewTextHandler(&log, nil)))
	st.Close()
	if !strings.Contains(log.String(), "(with the same --db)") || strings.Contains(log.String(), other) {
		t.Errorf("serve --db's warning of an unknown reveal key: %q; want the listing named (with the same --db), without the DSN", log.String())
	}
	hint := hintCommand(log.String())
	if hint == nil {
		t.Fatalf("the warning of an unknown reveal key names no command:\n%s", log.String())
	}
	code, stdout, stderr := runCLI(t, append(hint, "--db", other)...)
	if code != 0 {
		t.Fatalf("the warning %q names a command that, run with the same --db, exits %d: %s", log.String(), code, stderr)
	}
	if strings.Contains(stdout, "only-in-yaml-db") || !strings.Contains(stdout, "admin") {
		t.Errorf("`automator %s --db DSN` listed:\n%s\nwant the keys of --db's database (admin), not of automator.yaml's (only-in-yaml-db)", strings.Join(hint, " "), stdout)
	}
}
