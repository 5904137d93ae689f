package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/config"
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
	t.Parallel()
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

// readsFailAfterRotate is a store whose reads of accounts and keys fail
// once a rotation was committed through it: the database gone away right
// after the commit.
type readsFailAfterRotate struct {
	store.Store
	rotated bool
}

var errGoneAfterTheCommit = errors.New("the database went away after the commit")

func (s *readsFailAfterRotate) AccountRotate(ctx context.Context, p store.AccountRotateParams) (store.Account, error) {
	a, err := s.Store.AccountRotate(ctx, p)
	s.rotated = s.rotated || err == nil || errors.Is(err, store.ErrWithdrawalInterrupted)
	return a, err
}

func (s *readsFailAfterRotate) AccountKeys(ctx context.Context, name string) ([]store.AccountKey, error) {
	if s.rotated {
		return nil, errGoneAfterTheCommit
	}
	return s.Store.AccountKeys(ctx, name)
}

func (s *readsFailAfterRotate) AccountGet(ctx context.Context, name string) (store.Account, error) {
	if s.rotated {
		return store.Account{}, errGoneAfterTheCommit
	}
	return s.Store.AccountGet(ctx, name)
}

// TestRotationPrintsItsNewTokenWhenTheStoreFailsAfterTheCommit: once a
// rotate-token or rotate-key is committed, its printout is the only copy
// of the new token. A store that fails every read from then on must not
// lose it: the command prints the profile the account now has (the new
// token, the current key, the previous keys still usable) as a read after
// the commit would have rendered it.
func TestRotationPrintsItsNewTokenWhenTheStoreFailsAfterTheCommit(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	if code, _, stderr := runMain(t, "account", "create", "acme", "--data-dir", dir); code != 0 {
		t.Fatalf("account create acme: exit %d: %s", code, stderr)
	}
	for _, c := range []struct {
		rotateKey bool
		overlap   time.Duration
	}{
		{true, time.Hour}, // key 2, key 1 previous
		{false, time.Hour},
		{true, time.Hour}, // key 3, keys 2 and 1 previous
		{false, 0},
		{true, 0}, // key 4 alone
		{true, time.Hour},
	} {
		d, err := openAccountAdmin(t.Context(), dir, "")
		if err != nil {
			t.Fatal(err)
		}
		failing := &readsFailAfterRotate{Store: d.st}
		d.st = failing
		var out, errb bytes.Buffer
		err = rotateAccount(t.Context(), d, "acme", c.rotateKey, c.overlap, dir, Env{Stdout: &out, Stderr: &errb})
		if !failing.rotated {
			t.Fatalf("rotate (key %v, overlap %v) did not commit: %v, %s", c.rotateKey, c.overlap, err, errb.String())
		}
		token := regexp.MustCompile(`(?m)^token: (opt_\S+)$`).FindStringSubmatch(out.String())
		if err != nil || token == nil {
			d.st.Close()
			t.Fatalf("rotate (key %v, overlap %v) with reads failing after its commit: %v, stdout:\n%s\nstderr: %s\nwant the new profile", c.rotateKey, c.overlap, err, out.String(), errb.String())
		}
		at := time.Now()
		want, err := accountProfile(t.Context(), failing.Store, d.master, "acme", d.cfg.PublicURL, token[1], string(d.caPEM), at)
		d.st.Close()
		if err != nil {
			t.Fatal(err)
		}
		if out.String() != want {
			t.Errorf("rotate (key %v, overlap %v) printed:\n%s\nwant the profile the account has after it:\n%s", c.rotateKey, c.overlap, out.String(), want)
		}
	}
}

// keyRotatedMeanwhile is a store on which another process rotates the
// account's key between a rotation's read of the keys and its commit.
type keyRotatedMeanwhile struct {
	store.Store
	master crypto.MasterKey
	t      *testing.T
}

func (s *keyRotatedMeanwhile) AccountRotate(ctx context.Context, p store.AccountRotateParams) (store.Account, error) {
	k, err := crypto.NewKey(2)
	if err != nil {
		s.t.Fatal(err)
	}
	sealed, err := s.master.SealKey(p.Name, k)
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.Store.AccountRotate(ctx, store.AccountRotateParams{Name: p.Name, KeyID: 2, SealedKey: sealed, PreviousUntil: p.Now, Now: p.Now}); err != nil {
		s.t.Fatalf("the other process's rotate-key: %v", err)
	}
	return s.Store.AccountRotate(ctx, p)
}

// TestRotateTokenRacedByARotateKeyPrintsTheCurrentKey: a rotate-key of
// another process that commits while a rotate-token runs (after its read
// of the keys) makes a new current key. The rotate-token's profile must
// carry that key, not the one it read, which the other rotation withdrew.
func TestRotateTokenRacedByARotateKeyPrintsTheCurrentKey(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	if code, _, stderr := runMain(t, "account", "create", "acme", "--data-dir", dir); code != 0 {
		t.Fatalf("account create acme: exit %d: %s", code, stderr)
	}
	d, err := openAccountAdmin(t.Context(), dir, "")
	if err != nil {
		t.Fatal(err)
	}
	defer d.st.Close()
	raw := d.st
	d.st = &keyRotatedMeanwhile{Store: raw, master: d.master, t: t}
	var out, errb bytes.Buffer
	if err := rotateAccount(t.Context(), d, "acme", false, time.Hour, dir, Env{Stdout: &out, Stderr: &errb}); err != nil {
		t.Fatalf("rotate-token: %v (%s)", err, errb.String())
	}
	token := regexp.MustCompile(`(?m)^token: (opt_\S+)$`).FindStringSubmatch(out.String())
	if token == nil {
		t.Fatalf("rotate-token printed no token:\n%s", out.String())
	}
	want, err := accountProfile(t.Context(), raw, d.master, "acme", d.cfg.PublicURL, token[1], string(d.caPEM), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != want || !regexp.MustCompile(`(?m)^key: 2:`).MatchString(out.String()) {
		t.Errorf("rotate-token raced by a rotate-key printed:\n%s\nwant the profile with key 2:\n%s", out.String(), want)
	}
}

// instancesFail is a store whose listing of instances fails.
type instancesFail struct{ store.Store }

func (instancesFail) InstanceList(context.Context, string) ([]store.Instance, error) {
	return nil, errors.New("instances unreadable")
}

// TestRotationWhoseInstancesCannotBeListedNamesTheListingThatRunsAsPrinted:
// a rotation that cannot list the account's instances says so and names
// the command that lists them; run as printed, it works (it once lacked
// --data-dir and was refused).
func TestRotationWhoseInstancesCannotBeListedNamesTheListingThatRunsAsPrinted(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	if code, _, stderr := runMain(t, "account", "create", "acme", "--data-dir", dir); code != 0 {
		t.Fatalf("account create acme: exit %d: %s", code, stderr)
	}
	d, err := openAccountAdmin(t.Context(), dir, "")
	if err != nil {
		t.Fatal(err)
	}
	d.st = instancesFail{d.st}
	var out, errb bytes.Buffer
	err = rotateAccount(t.Context(), d, "acme", false, time.Hour, dir, Env{Stdout: &out, Stderr: &errb})
	d.st.Close()
	var line string // the warning, among the rotation's other notes
	for _, l := range strings.Split(errb.String(), "\n") {
		if strings.Contains(l, "could not be listed") {
			line = l
		}
	}
	hint := hintCommand(line)
	if err != nil || !strings.Contains(line, "instances unreadable") || hint == nil {
		t.Fatalf("rotate-token with the instances unreadable: %v, stderr %q; want it done, naming the command that lists them", err, errb.String())
	}
	if code, _, stderr := runMain(t, hint...); code != 0 || hint[0] != "instances" {
		t.Errorf("rotate-token printed %q; that command run as printed: exit %d: %s", line, code, stderr)
	}
}

// TestNoProfileIsMadeThatNoProxyCouldUse: with public_url gone from
// automator.yaml, or ca.pem not a certificate, account create, rotate-key
// and rotate-token refuse before anything changes, naming the file and
// what to do: the profiles they print would not reach, or trust, the
// automator, and rotate-key and rotate-token would have replaced the
// account's working profile with it.
func TestNoProfileIsMadeThatNoProxyCouldUse(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	if code, _, stderr := runCLI(t, "account", "create", "acme", "--data-dir", dir); code != 0 {
		t.Fatalf("account create: exit %d: %s", code, stderr)
	}
	yamlPath := filepath.Join(dir, config.FileConfig)
	good, err := os.ReadFile(yamlPath)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, l := range strings.Split(string(good), "\n") {
		if !strings.HasPrefix(l, "public_url:") {
			kept = append(kept, l)
		}
	}
	if err := os.WriteFile(yamlPath, []byte(strings.Join(kept, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	_, before, _ := runCLI(t, "account", "list", "--data-dir", dir, "--json")
	for _, args := range [][]string{{"account", "create", "globex"}, {"account", "rotate-key", "acme"}, {"account", "rotate-token", "acme"}} {
		code, stdout, stderr := runCLI(t, append(args, "--data-dir", dir)...)
		if code != ExitError || stdout != "" || !strings.Contains(stderr, "public_url in "+yamlPath) || !strings.Contains(stderr, "nothing was changed") {
			t.Errorf("%v without public_url: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	if _, after, _ := runCLI(t, "account", "list", "--data-dir", dir, "--json"); after != before {
		t.Errorf("refused commands changed the accounts: %s, then %s", before, after)
	}

	if err := os.WriteFile(yamlPath, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, config.FileCACert), []byte("junk\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, "account", "rotate-key", "acme", "--data-dir", dir)
	if code != ExitError || stdout != "" || !strings.Contains(stderr, filepath.Join(dir, config.FileCACert)+": ") || !strings.Contains(stderr, "would trust no automator") {
		t.Errorf("rotate-key with a ca.pem that holds no certificate: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if _, after, _ := runCLI(t, "account", "list", "--data-dir", dir, "--json"); after != before {
		t.Errorf("a refused rotate-key changed the accounts: %s, then %s", before, after)
	}
}

// TestASecretPrintedOnceIsNotSentToTheNullDevice: account create,
// rotate-token and apikey create with stdout the null device (closed at
// the start, which Go makes the null device, or sent there) refuse before
// anything changes: the write would succeed and the secret, printed only
// once, go nowhere, while the command said it was on stdout.
func TestASecretPrintedOnceIsNotSentToTheNullDevice(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	if code, _, stderr := runCLI(t, "account", "create", "acme", "--data-dir", dir); code != 0 {
		t.Fatalf("account create: exit %d: %s", code, stderr)
	}
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	_, before, _ := runCLI(t, "account", "list", "--data-dir", dir, "--json")
	_, keysBefore, _ := runCLI(t, "apikey", "list", "--data-dir", dir)
	for _, args := range [][]string{{"account", "create", "globex"}, {"account", "rotate-token", "acme"}, {"apikey", "create", "ci", "--all-accounts"}} {
		var errb bytes.Buffer
		code := Main(t.Context(), append(args, "--data-dir", dir), Env{Stdout: null, Stderr: &errb})
		if code != ExitError || !strings.Contains(errb.String(), "stdout is "+os.DevNull+" (closed, or sent there)") || !strings.Contains(errb.String(), "nothing was changed") {
			t.Errorf("%v with stdout the null device: exit %d, stderr %q", args, code, errb.String())
		}
	}
	_, after, _ := runCLI(t, "account", "list", "--data-dir", dir, "--json")
	_, keysAfter, _ := runCLI(t, "apikey", "list", "--data-dir", dir)
	if after != before || keysAfter != keysBefore {
		t.Errorf("refused commands changed the accounts or keys: %s / %s, then %s / %s", before, keysBefore, after, keysAfter)
	}
}
