package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/config"
)

// TestFailedInitLeavesNothingBehindAndCanBeRunAgain: an init that fails at
// its database (one another init made, a directory that does not exist)
// removes the master key, CA and certificates it had written, and the
// directory it made, so that the next init, with the cause fixed, succeeds
// instead of stopping at "master.key: file exists". A directory that was
// there keeps what was in it.
func TestFailedInitLeavesNothingBehindAndCanBeRunAgain(t *testing.T) {
	t.Parallel()
	other := initDir(t)
	otherDB := filepath.Join(other, config.FileDB)
	cli := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := Main(t.Context(), args, Env{Stdout: &out, Stderr: &errb})
		return code, out.String() + errb.String()
	}
	entries := func(dir string) []string {
		t.Helper()
		des, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, de := range des {
			names = append(names, de.Name())
		}
		return names
	}

	for _, tc := range []struct {
		name, db, want string
	}{
		{"a database another init made", otherDB, "already has the admin API key of an earlier `automator init`"},
		{"a database in a missing directory", filepath.Join(t.TempDir(), "absent", "a.db"), "does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A data directory init makes, and one that holds a file already.
			fresh := filepath.Join(t.TempDir(), "data")
			existing := t.TempDir()
			if err := os.WriteFile(filepath.Join(existing, "notes.txt"), []byte("mine\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, dir := range []string{fresh, existing} {
				code, out := cli("init", "--data-dir", dir, "--public-url", "https://127.0.0.1:8443", "--db", tc.db)
				if code != ExitError || !strings.Contains(out, tc.want) {
					t.Fatalf("init --data-dir %s --db %s: exit %d: %s; want exit %d saying %q", dir, tc.db, code, out, ExitError, tc.want)
				}
			}
			if _, err := os.Stat(fresh); !os.IsNotExist(err) {
				t.Errorf("the data directory the failed init made is still there (%v), holding %q", err, entries(fresh))
			}
			if got := entries(existing); !slices.Equal(got, []string{"notes.txt"}) {
				t.Errorf("the existing directory holds %q after the failed init, want only notes.txt", got)
			}
			if data, err := os.ReadFile(filepath.Join(existing, "notes.txt")); err != nil || string(data) != "mine\n" {
				t.Errorf("notes.txt after the failed init: %q, %v", data, err)
			}

			for _, dir := range []string{fresh, existing} {
				if code, out := cli("init", "--data-dir", dir, "--public-url", "https://127.0.0.1:8443"); code != 0 {
					t.Fatalf("init --data-dir %s again, with its own database: exit %d: %s", dir, code, out)
				}
				if code, out := cli("account", "create", "acme", "--data-dir", dir); code != 0 {
					t.Errorf("account create in the data directory made on the second try: exit %d: %s", code, out)
				}
			}
		})
	}
	if code, out := cli("account", "list", "--data-dir", other); code != 0 || strings.Contains(out, "acme") {
		t.Errorf("the other data directory's database after the failed inits: exit %d:\n%s", code, out)
	}
}

// TestInitRefusesAPlaintextPublicURLOffLoopback: the automator serves
// plaintext on loopback only, so a public URL http://HOST:PORT elsewhere
// would go into every profile as an address that cannot answer, and its
// proxies would send their token in clear trying. init refuses it, naming
// public_url, and makes nothing; http:// on loopback stays allowed (tests
// and demos with --insecure-plaintext).
func TestInitRefusesAPlaintextPublicURLOffLoopback(t *testing.T) {
	t.Parallel()
	cli := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := Main(t.Context(), args, Env{Stdout: &out, Stderr: &errb})
		return code, out.String() + errb.String()
	}
	for _, url := range []string{"http://automator.example:8443", "http://10.1.2.3:8443", "http://0.0.0.0:8443"} {
		dir := filepath.Join(t.TempDir(), "data")
		code, out := cli("init", "--data-dir", dir, "--public-url", url)
		if code != ExitError || !strings.Contains(out, "public_url:") || !strings.Contains(out, "https://") {
			t.Errorf("init --public-url %s: exit %d: %s; want exit %d naming public_url and https://", url, code, out, ExitError)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("init --public-url %s made %s (%v)", url, dir, err)
		}
	}
	for _, url := range []string{"http://127.0.0.1:8443", "http://localhost:8443", "https://automator.example:8443"} {
		if code, out := cli("init", "--data-dir", filepath.Join(t.TempDir(), "data"), "--public-url", url); code != 0 {
			t.Errorf("init --public-url %s: exit %d: %s; want it accepted", url, code, out)
		}
	}
}

// TestCommandHelpShowsItsFormsAndFlags: `automator serve --help` prints
// serve's form and every flag serve takes, those not on the form too, and
// exits 0.
func TestCommandHelpShowsItsFormsAndFlags(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if code := Main(t.Context(), []string{"serve", "--help"}, Env{Stdout: &out, Stderr: &errb}); code != 0 || errb.Len() > 0 {
		t.Fatalf("serve --help: exit %d, stderr %q; want 0 and nothing", code, errb.String())
	}
	for _, want := range []string{"automator serve   --data-dir DIR", "--insecure-plaintext", "--replica-id string"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("serve --help lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "automator init") {
		t.Errorf("serve --help shows the other commands' forms:\n%s", out.String())
	}
}

// TestABadFlagIsOneLineAndNoHelp: a bad flag or flag value is one line on
// stderr and exit 255, with no help on stdout (where exec writes the
// remote script's output).
func TestABadFlagIsOneLineAndNoHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"exec", "--data-dir", t.TempDir(), "--account", "acme", "--timeout", "abc", "hello.sh"},
		{"init", "--bogus"},
	} {
		code, stdout, stderr := runMain(t, args...)
		if code != ExitError || stdout != "" || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 255, nothing, one line", args, code, stdout, stderr)
		}
	}
}

// TestInitWritesItsSecretsForItsOwnerOnly: the master key, the admin API
// key, the private keys of the CA and the server certificate, and the
// database (token hashes, sealed account keys, sealed units) are mode 0600.
func TestInitWritesItsSecretsForItsOwnerOnly(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("no unix permission bits on windows")
	}
	dir := initDir(t)
	for _, name := range []string{config.FileMasterKey, config.FileAPIKey, config.FileCAKey, config.FileKey, config.FileDB} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %04o after init, want 0600", name, fi.Mode().Perm())
		}
	}
}

// TestInitRefusesADirectoryOthersMayWrite: init into an existing directory
// that others may write (its keys could be replaced there) is refused,
// naming the mode and the fix, and writes nothing; the same directory
// made private is initialised, and a directory init makes is 0700. Before,
// init wrote its keys into a world-writable directory without a word (a
// review).
func TestInitRefusesADirectoryOthersMayWrite(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("no unix permission bits on windows")
	}
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil { // past the umask
		t.Fatal(err)
	}
	code, _, stderr := runMain(t, "init", "--data-dir", dir)
	if code != ExitError || !strings.Contains(stderr, "is writable by every user (mode drwxrwxrwx)") || !strings.Contains(stderr, "chmod 700 it") {
		t.Fatalf("init into a world-writable directory: exit %d, %q; want it refused, naming the mode and the fix", code, stderr)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the refused init wrote %d files", len(entries))
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runMain(t, "init", "--data-dir", dir); code != 0 {
		t.Fatalf("init into the directory made private: exit %d: %s", code, stderr)
	}
	made := filepath.Join(t.TempDir(), "made")
	if code, _, stderr := runMain(t, "init", "--data-dir", made); code != 0 {
		t.Fatalf("init into a new directory: exit %d: %s", code, stderr)
	}
	fi, err := os.Stat(made)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("the directory init made has mode %v; want 0700", fi.Mode())
	}
}

// TestAnErrorOfSeveralProblemsIsOneLine: a command that finds several
// problems at once (two --server addresses without a port, two settings of
// automator.yaml out of bounds) names them all on one line of stderr and
// exits 255, as DESIGN.md asks of exec's own errors.
func TestAnErrorOfSeveralProblemsIsOneLine(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	path := filepath.Join(dir, config.FileConfig)
	yaml, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	yaml = bytes.Replace(yaml, []byte("poll_window: 30s"), []byte("poll_window: 1ms"), 1)
	yaml = bytes.Replace(yaml, []byte("default_timeout: 5m0s"), []byte("default_timeout: 48h"), 1)
	if err := os.WriteFile(path, yaml, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"exec", "--server", "https://x,https://y", "--api-key-file", filepath.Join(dir, config.FileAPIKey),
			"--ca", filepath.Join(dir, config.FileCACert), "--account", "acme", "hello.sh"}, []string{`"https://x"`, `"https://y"`}},
		{[]string{"serve", "--data-dir", dir}, []string{"poll_window", "default_timeout"}},
	} {
		code, stdout, stderr := runMain(t, c.args...)
		if code != ExitError || stdout != "" || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 255, nothing, one line", c.args[0], code, stdout, stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr %q does not name %s", c.args[0], stderr, w)
			}
		}
	}
}

// TestHelpNamingACommandIsThatCommandsHelp: `automator help exec` prints
// what `automator exec --help` does, and `automator help account create`
// what `automator account create --help` does, not the whole list; `help`
// of a command that does not exist says so.
func TestHelpNamingACommandIsThatCommandsHelp(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		form string
	}{
		{[]string{"help", "exec"}, "automator exec    --data-dir DIR --account NAME"},
		{[]string{"help", "account", "create"}, "automator account create NAME --data-dir DIR"},
		{[]string{"help", "work"}, "automator work cancel ID..."},
	} {
		code, stdout, stderr := runMain(t, c.args...)
		if code != 0 || stderr != "" || !strings.Contains(stdout, c.form) || strings.Contains(stdout, "automator init") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 0 and that command's help only", c.args, code, stdout, stderr)
		}
	}
	if code, stdout, stderr := runMain(t, "help", "nosuch"); code != ExitError || stdout != "" || !strings.Contains(stderr, `unknown command "nosuch"`) {
		t.Errorf("help nosuch: exit %d, stdout %q, stderr %q; want %d and the unknown command named", code, stdout, stderr, ExitError)
	}
}

// TestHelpOfACommandGroupListsItsForms: `automator account --help` (and
// -h, help; of work, apikey and cert too) prints the group's forms on
// stdout and exits 0, as `automator exec --help` does for exec, instead of
// a usage error.
func TestHelpOfACommandGroupListsItsForms(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ group, form string }{
		{"account", "automator account create NAME --data-dir DIR"},
		{"work", "automator work cancel ID..."},
		{"apikey", "automator apikey revoke ID --data-dir DIR"},
		{"cert", "automator cert renew --data-dir DIR"},
	} {
		for _, help := range []string{"--help", "-h", "help"} {
			code, stdout, stderr := runMain(t, c.group, help)
			if code != 0 || stderr != "" || !strings.Contains(stdout, c.form) || strings.Contains(stdout, "automator init") {
				t.Errorf("%s %s: exit %d, stdout %q, stderr %q; want 0 and the group's forms only", c.group, help, code, stdout, stderr)
			}
		}
	}
}

// TestABadServerAddressIsNamedAsTheFlag: an exec, work wait or work cancel
// whose --server lists an address that is not https://HOST:PORT names it
// as --server, every bad one at once, not by the Go client's field.
func TestABadServerAddressIsNamedAsTheFlag(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	caller := []string{"--api-key-file", filepath.Join(dir, config.FileAPIKey), "--ca", filepath.Join(dir, config.FileCACert)}
	for _, args := range [][]string{
		{"exec", "--account", "acme", "--server", "https://x,https://127.0.0.1:8443,https://y:0"},
		{"work", "wait", "--server", "https://x,https://127.0.0.1:8443,https://y:0"},
		{"work", "cancel", "--server", "https://x,https://127.0.0.1:8443,https://y:0"},
	} {
		args = append(append(args, caller...), "hello.sh")
		code, stdout, stderr := runMain(t, args...)
		want := `automator: --server "https://x" must be https://HOST:PORT; --server "https://y:0": port 0 is not a TCP port (1 to 65535)` + "\n"
		if code != ExitError || stdout != "" || stderr != want {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 255, nothing, %q", args[0], code, stdout, stderr, want)
		}
	}
}

// TestAServerAddressWithAPasswordIsRefusedWithoutShowingIt: a --server URL
// carrying a user name and password is refused, the password hidden, saying
// that a caller authenticates with its API key.
func TestAServerAddressWithAPasswordIsRefusedWithoutShowingIt(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	code, _, stderr := runMain(t, "exec", "--account", "acme", "--server", "https://u:hunter2@127.0.0.1:8443",
		"--api-key-file", filepath.Join(dir, config.FileAPIKey), "--ca", filepath.Join(dir, config.FileCACert), "hello.sh")
	if code != ExitError || strings.Contains(stderr, "hunter2") || !strings.Contains(stderr, "a caller with its API key") {
		t.Errorf("exec --server with a password: exit %d, stderr %q; want 255, the password hidden, naming the API key", code, stderr)
	}
}
