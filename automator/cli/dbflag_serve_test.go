//go:build linux

package cli

import (
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store"
)

// TestACommandWithoutDBIsRefusedWhileServeRunsOnAnother: while a serve
// given --db runs (serving.yaml names its database), a command that opens
// the database without --db, which would open automator.yaml's, is
// refused, saying to give serve's --db, before it changes anything (cert
// renew renews no certificate); with --db, serve's or another, it runs.
// exec's hint for an unknown account says so too. A --db naming
// automator.yaml's own database by another spelling, or by a path through
// a symbolic link, is no other database.
func TestACommandWithoutDBIsRefusedWhileServeRunsOnAnother(t *testing.T) {
	t.Parallel()
	t.Run("another database", func(t *testing.T) {
		t.Parallel()
		dir := initDir(t)
		mine := filepath.Join(dir, config.FileDB)
		other := filepath.Join(t.TempDir(), "other.db")
		if code, _, stderr := runCLI(t, "backup", "--data-dir", dir, other); code != 0 {
			t.Fatalf("backup into other.db: exit %d: %s", code, stderr)
		}
		serveDirInProcess(t, dir, "--db", "sqlite:"+other)
		before := auditCounts(t, mine)
		cert, err := os.ReadFile(filepath.Join(dir, config.FileCert))
		if err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"account", "create", "acme"},
			{"apikey", "create", "ci", "--all-accounts"},
			{"apikey", "list"},
			{"account", "list"},
			{"audit"},
			{"backup", filepath.Join(t.TempDir(), "b.db")},
			// Its record would go to a database serve does not use: it
			// renews nothing rather than renew unrecorded.
			{"cert", "renew"},
		} {
			code, stdout, stderr := runCLI(t, append(args, "--data-dir", dir)...)
			if code != ExitError || !strings.Contains(stderr, other) || !strings.Contains(stderr, "--db") {
				t.Errorf("%s without --db under a serve given --db: exit %d, stdout %q, stderr %q; want exit %d naming serve's database and --db", strings.Join(args, " "), code, stdout, stderr, ExitError)
			}
		}
		if after := auditCounts(t, mine); len(after) != len(before) || after[store.AuditAccountCreated] != 0 || after[store.AuditAPIKeyCreated] != before[store.AuditAPIKeyCreated] {
			t.Errorf("automator.yaml's database after the refused commands: audit events %v, want %v as before", after, before)
		}
		if now, err := os.ReadFile(filepath.Join(dir, config.FileCert)); err != nil || string(now) != string(cert) {
			t.Errorf("%s after the refused cert renew: changed (%v)", config.FileCert, err)
		}
		if code, _, stderr := runCLI(t, "account", "create", "acme", "--data-dir", dir, "--db", "sqlite:"+other); code != 0 {
			t.Errorf("account create with serve's --db: exit %d: %s", code, stderr)
		}
		// Given --db, a command acts on the database it names, whatever
		// serve runs on: automator.yaml's, to look at it, say.
		if code, _, stderr := runCLI(t, "account", "list", "--data-dir", dir, "--db", "sqlite:"+mine); code != 0 {
			t.Errorf("account list with --db naming automator.yaml's database under a serve given another --db: exit %d: %s", code, stderr)
		}
		code, _, stderr := runCLI(t, "exec", "--data-dir", dir, "--account", "globex", "@ping")
		if code != ExitError || !strings.Contains(stderr, "automator account list --data-dir") || !strings.Contains(stderr, "--db") {
			t.Errorf("exec to an unknown account under a serve given --db: exit %d, stderr %q; want the account list hint to say to give serve's --db", code, stderr)
		}
		if code, _, stderr := runCLI(t, "apikey", "revoke", "admin", "--data-dir", dir, "--db", "sqlite:"+other); code != 0 {
			t.Fatalf("apikey revoke admin --db: exit %d: %s", code, stderr)
		}
		code, _, stderr = runCLI(t, "exec", "--data-dir", dir, "--account", "acme", "@ping")
		if code != ExitError || !strings.Contains(stderr, "automator apikey create admin") || !strings.Contains(stderr, "--db") {
			t.Errorf("exec with admin.apikey revoked under a serve given --db: exit %d, stderr %q; want the apikey create hint to say to give serve's --db", code, stderr)
		}
	})
	t.Run("its own database by a path through a symbolic link", func(t *testing.T) {
		t.Parallel()
		dir := initDir(t)
		link := filepath.Join(t.TempDir(), "data")
		if err := os.Symlink(dir, link); err != nil {
			t.Fatal(err)
		}
		serveDirInProcess(t, dir, "--db", "sqlite:"+filepath.Join(link, config.FileDB))
		if code, _, stderr := runCLI(t, "account", "create", "acme", "--data-dir", dir); code != 0 {
			t.Errorf("account create without --db under a serve given its own database through a symbolic link: exit %d: %s", code, stderr)
		}
	})
	t.Run("its own database spelt otherwise", func(t *testing.T) {
		t.Parallel()
		dir := initDir(t)
		serveDirInProcess(t, dir, "--db", "sqlite:"+filepath.Join(dir, ".", config.FileDB))
		if code, _, stderr := runCLI(t, "account", "create", "acme", "--data-dir", dir); code != 0 {
			t.Errorf("account create without --db under a serve given its own database as --db: exit %d: %s", code, stderr)
		}
		code, _, stderr := runCLI(t, "exec", "--data-dir", dir, "--account", "globex", "@ping")
		if code != ExitError || strings.Contains(stderr, "--db") {
			t.Errorf("exec to an unknown account: exit %d, stderr %q; want a hint without --db", code, stderr)
		}
	})
}

// TestTheDashboardNamesServesDBInTheCommandsItPrints: the dashboard of a
// serve given --db names that --db in the CLI commands it prints, so one
// run as printed acts on serve's database rather than being refused (or
// acting on automator.yaml's); its sign-in form, shown to anyone, only
// says to give serve's --db, naming no database.
func TestTheDashboardNamesServesDBInTheCommandsItPrints(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	other := filepath.Join(t.TempDir(), "other.db")
	if code, _, stderr := runCLI(t, "backup", "--data-dir", dir, other); code != 0 {
		t.Fatalf("backup into other.db: exit %d: %s", code, stderr)
	}
	s := serveDirInProcess(t, dir, "--db", "sqlite:"+other)
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Jar: jar}
	signIn := func(key string) string {
		t.Helper()
		resp, err := c.PostForm(s.http+"/dashboard/login", url.Values{"api_key": {key}})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return html.UnescapeString(string(body))
	}
	const help = "run automator apikey create admin --all-accounts --data-dir DIR --db DSN on the automator's host, DIR being its data directory and DSN the --db its serve was given"
	if page := signIn("oak_not-a-key"); !strings.Contains(page, help) || strings.Contains(page, other) {
		t.Errorf("the refused sign-in: %s\nwant it to say %q, naming no database", page, help)
	}
	key, err := os.ReadFile(filepath.Join(dir, config.FileAPIKey))
	if err != nil {
		t.Fatal(err)
	}
	page := signIn(strings.TrimSpace(string(key))) // then the accounts page: none yet
	m := regexp.MustCompile(`Make one with <code>(automator account create [^<]*)</code>`).FindStringSubmatch(page)
	if m == nil || !strings.Contains(m[1], " --db "+other) {
		t.Fatalf("the accounts page of a serve given --db: %s\nwant it to name `automator account create` with --db %s", page, other)
	}
	args := strings.Fields(strings.NewReplacer("NAME", "acme", "DIR", dir).Replace(m[1]))[1:]
	if code, _, stderr := runCLI(t, args...); code != 0 {
		t.Fatalf("%s, as the dashboard printed it: exit %d: %s", m[1], code, stderr)
	}
	if counts := auditCounts(t, other); counts[store.AuditAccountCreated] != 1 {
		t.Errorf("serve's database after the printed account create: %d account.created events, want 1", counts[store.AuditAccountCreated])
	}
}
