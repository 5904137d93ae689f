//go:build linux

package e2e

import (
	"bytes"
	"database/sql"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" driver, to tamper with the database

	"github.com/opsgate/opsgate/automator/config"
)

// A proxy whose token is wrong is refused (Unauthenticated), says so once in
// its log rather than once per attempt, and keeps retrying with backoff; a
// proxy with the right token then serves the account.
func TestWrongTokenIsRefusedAndProxyKeepsRetrying(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	good := a.createAccount(t, "acme")
	scripts := t.TempDir()
	writeScript(t, scripts, "hello.sh", `echo hello`)

	token := profileValue(t, good, "token")
	last := "A"
	if strings.HasSuffix(token, last) {
		last = "B"
	}
	wrong := token[:len(token)-1] + last // same form, another token
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, bad, strings.Replace(string(data), "token: "+token, "token: "+wrong, 1))

	pBad := startProxy(t, bad, scripts, "bad")
	// Count the attempts on the automator's side: one refused poll each.
	refusedPolls := func() int {
		n := 0
		for _, l := range strings.Split(a.Log(), "\n") {
			if strings.Contains(l, "authentication failed") && strings.Contains(l, "ProxyService/Poll") {
				n++
			}
		}
		return n
	}
	waitFor(t, 15*time.Second, "4 refused polls", func() bool { return refusedPolls() >= 4 })
	attempts := refusedPolls()
	tokenLines := func() []string {
		var out []string
		for _, l := range strings.Split(pBad.Log(), "\n") {
			if strings.Contains(l, "Unauthenticated") || strings.Contains(l, "refused") {
				out = append(out, l)
			}
		}
		return out
	}
	if got := tokenLines(); len(got) != 1 || !strings.Contains(got[0], "token") {
		t.Errorf("after %d refused attempts the proxy logged %d lines about it, want exactly one naming the token:\n%s",
			attempts, len(got), strings.Join(got, "\n"))
	}
	if pBad.Exited() {
		t.Fatalf("the proxy with the wrong token exited (%d); it should keep retrying", pBad.ExitCode())
	}
	waitFor(t, 20*time.Second, "the refused proxy to try again", func() bool { return refusedPolls() > attempts })
	if got := tokenLines(); len(got) != 1 {
		t.Errorf("after more attempts the proxy logged %d lines about the refused token, want still one", len(got))
	}

	startProxy(t, good, scripts, "good").WaitPolling(t)
	if r := a.Exec("--account", "acme", "--timeout", "20s", "hello.sh"); r.Code != 0 || r.Stdout != "hello\n" {
		t.Errorf("exec with a correctly configured proxy: %v; want exit 0, stdout \"hello\\n\"", r)
	}
}

// End-to-end sealing: a queued unit whose sealed command was altered in the
// database fails on the proxy ("did not open"), and nothing runs.
func TestTamperedCommandFailsAndRunsNothing(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	cfg := a.createAccount(t, "acme")
	scripts := t.TempDir()
	marker := filepath.Join(t.TempDir(), "ran")
	writeScript(t, scripts, "marker.sh", `touch "$1"`)

	bg := a.StartExec(t, "--account", "acme", "--timeout", "20s", "marker.sh", marker)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(a.DataDir, config.FileDB)+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var id string
	var sealed []byte
	waitFor(t, 10*time.Second, "the unit to be queued", func() bool {
		err := db.QueryRow(`SELECT id, sealed_command FROM work WHERE state = 'queued'`).Scan(&id, &sealed)
		return err == nil
	})
	sealed[len(sealed)/2] ^= 0x01 // a ciphertext byte
	res, err := db.Exec(`UPDATE work SET sealed_command = ? WHERE id = ? AND state = 'queued'`, sealed, id)
	if err != nil {
		t.Fatalf("tampering with work %s: %v", id, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("tampering with work %s changed %d rows, want 1", id, n)
	}
	db.Close()

	startProxy(t, cfg, scripts, "a")
	r := bg.Wait(t, 30*time.Second)
	if r.Code != 125 || !strings.Contains(r.Stderr, "sealed command did not open") {
		t.Errorf("exec: %v; want exit 125 with a reason saying the sealed command did not open", r)
	}
	if exists(marker) {
		t.Errorf("the script ran although its command was tampered with")
	}
}

// The proxy runs only scripts inside its scripts directory: a relative path
// out of it and an absolute path are refused at submit (exec exits 255,
// nothing queued), as are a hidden file and an editor's backup, which are
// no deployed scripts; a symlink leading out is refused by the proxy
// (125); nothing outside runs, nor the hidden file or the backup.
func TestScriptsOutsideScriptsDirAreRefused(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	cfg := a.createAccount(t, "acme")
	root := t.TempDir()
	scripts := filepath.Join(root, "scripts")
	if err := os.Mkdir(scripts, 0o755); err != nil {
		t.Fatal(err)
	}
	markers := filepath.Join(root, "markers")
	if err := os.Mkdir(markers, 0o755); err != nil {
		t.Fatal(err)
	}
	writeScript(t, root, "x", `touch "`+markers+`/x"`)
	outside := writeScript(t, root, "outside.sh", `touch "`+markers+`/outside"`)
	if err := os.Symlink(outside, filepath.Join(scripts, "link.sh")); err != nil {
		t.Fatal(err)
	}
	writeScript(t, scripts, ".hidden.sh", `touch "`+markers+`/hidden"`)
	writeScript(t, scripts, "x.sh~", `touch "`+markers+`/backup"`)
	startProxy(t, cfg, scripts, "a").WaitPolling(t)

	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		reason string
	}{
		{"relative path out", []string{"../x"}, 255, `command.script "../x" is refused: contains a path separator`},
		{"absolute path", []string{"/bin/sh", "-c", "touch " + markers + "/sh"}, 255, `command.script "/bin/sh" is refused: is an absolute path`},
		{"hidden file", []string{".hidden.sh"}, 255, "starts with '.' (a hidden file)"},
		{"editor's backup", []string{"x.sh~"}, 255, "ends in '~' (an editor's backup)"},
		{"symlink out", []string{"link.sh"}, 125, "outside the scripts directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := a.Exec(append([]string{"--account", "acme", "--timeout", "20s"}, tc.args...)...)
			if r.Code != tc.code || !strings.Contains(r.Stderr, tc.reason) || strings.Count(r.Stderr, "\n") != 1 {
				t.Errorf("exec %q: %v; want exit %d and one line naming the refusal (%q)", tc.args[0], r, tc.code, tc.reason)
			}
		})
	}
	if entries, _ := os.ReadDir(markers); len(entries) > 0 {
		for _, e := range entries {
			t.Errorf("something outside the scripts directory ran: marker %q exists", e.Name())
		}
	}
}

// A copy of the database alone reveals no command, result, token or key:
// after units with distinctive strings ran, none of those strings (nor any
// secret) appears in the database files, WAL included, nor in a backup.
func TestDatabaseHoldsNoPlaintext(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	cfg := a.createAccount(t, "acme")
	scripts, dir := t.TempDir(), t.TempDir()
	const script, missing = "secret-script-CANARY-0.sh", "secret-missing-CANARY-4.sh"
	writeScript(t, scripts, script, `read line
echo "OUTPUT-CANARY-3"
echo "stderr-CANARY-5 $line" >&2`)
	stdin := filepath.Join(dir, "stdin")
	writeFile(t, stdin, "STDIN-CANARY-2\n")
	startProxy(t, cfg, scripts, "a").WaitPolling(t)

	for range 3 {
		r := a.Exec("--account", "acme", "--timeout", "20s", "--stdin", stdin, script, "ARG-CANARY-1")
		if r.Code != 0 || r.Stdout != "OUTPUT-CANARY-3\n" || r.Stderr != "stderr-CANARY-5 STDIN-CANARY-2\n" {
			t.Fatalf("exec: %v; want exit 0, the canary output, and stdin echoed on stderr", r)
		}
	}
	// A failure's reason names the script: it must be sealed too.
	if r := a.Exec("--account", "acme", "--timeout", "20s", missing, "ARG-CANARY-1"); r.Code != 125 || !strings.Contains(r.Stderr, missing) {
		t.Fatalf("exec of a missing script: %v; want exit 125 naming it", r)
	}

	token := profileValue(t, cfg, "token")
	key := profileValue(t, cfg, "key")
	_, keyText, _ := strings.Cut(key, ":")
	keyRaw, err := base64.RawURLEncoding.DecodeString(keyText)
	if err != nil {
		t.Fatalf("account key secret is not base64url: %v", err)
	}
	apiKey, err := os.ReadFile(filepath.Join(a.DataDir, config.FileAPIKey))
	if err != nil {
		t.Fatal(err)
	}
	masterText, err := os.ReadFile(filepath.Join(a.DataDir, config.FileMasterKey))
	if err != nil {
		t.Fatal(err)
	}
	masterRaw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(masterText)))
	if err != nil {
		t.Fatalf("master key file is not base64: %v", err)
	}
	secrets := map[string][]byte{
		"script name":         []byte("secret-script-CANARY-0"),
		"missing script name": []byte("secret-missing-CANARY-4"),
		"argument":            []byte("ARG-CANARY-1"),
		"stdin":               []byte("STDIN-CANARY-2"),
		"stdout":              []byte("OUTPUT-CANARY-3"),
		"stderr":              []byte("stderr-CANARY-5"),
		"account token":       []byte(token),
		"account key (text)":  []byte(keyText),
		"account key (raw)":   keyRaw,
		"admin API key":       bytes.TrimSpace(apiKey),
		"master key (text)":   bytes.TrimSpace(masterText),
		"master key (raw)":    masterRaw,
	}

	files, err := filepath.Glob(filepath.Join(a.DataDir, config.FileDB+"*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no database files in %s (%v)", a.DataDir, err)
	}
	// A backup holds the database alone: no more than the database.
	backup := filepath.Join(t.TempDir(), "automator.backup")
	if r := runCLI(bin.automator, "backup", "--data-dir", a.DataDir, backup); r.Code != 0 {
		t.Fatalf("automator backup: %v", r)
	}
	files = append(files, backup)
	t.Logf("database files: %q", files)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for what, s := range secrets {
			if len(s) < 8 {
				t.Fatalf("%s is too short to search for: %q", what, s)
			}
			if bytes.Contains(data, s) {
				t.Errorf("%s holds the %s in plaintext", filepath.Base(f), what)
			}
		}
	}
}
