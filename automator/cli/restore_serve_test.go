//go:build linux

package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
	"github.com/opsgate/opsgate/internal/logtest"
)

// TestRestoreAndServeExcludeEachOther: restore is refused while a serve
// of the data directory runs, and a serve does not start while a restore
// holds the directory.
func TestRestoreAndServeExcludeEachOther(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	file := takeBackup(t, dir)
	cfg := listenOnAnyPort(t, dir)
	stop := serveInBackground(t, dir)
	for _, args := range [][]string{{"restore", "--data-dir", dir, file}, {"restore", "--data-dir", dir, "--open-work-only"}} {
		code, _, stderr := runCLI(t, args...)
		if code != ExitError || !strings.Contains(stderr, "an automator serve or another command is using "+dir) {
			t.Errorf("%s while serve runs: exit %d, stderr %q; want %d and that serve runs", strings.Join(args, " "), code, stderr, ExitError)
		}
	}
	if matches, _ := filepath.Glob(cfg.DBPath(dir) + ".*"); len(matches) != 0 {
		t.Errorf("a refused restore left %v", matches)
	}
	stop()

	lock, err := lockForRestore(dir)
	if err != nil {
		t.Fatalf("taking the restore's lock once serve stopped: %v", err)
	}
	defer lock.Release()
	code, _, stderr := runCLI(t, "serve", "--data-dir", dir)
	if code != ExitError || !strings.Contains(stderr, "a restore is under way") {
		t.Errorf("serve during a restore: exit %d, stderr %q; want %d and that a restore is under way", code, stderr, ExitError)
	}
}

// TestRestoreAndRepairAreRefusedWhileAServeOfAnotherDirectoryUsesTheDatabase:
// a serve of one data directory holds its SQLite database's own lock, and
// a restore or repair through another directory given that database
// (--db) is refused by it, replacing nothing: it took only its own
// directory's lock, and replaced the database under the serve, whose
// units then went to the file set aside (a review: a unit lost, and an
// idempotency key's unit run twice).
func TestRestoreAndRepairAreRefusedWhileAServeOfAnotherDirectoryUsesTheDatabase(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	file := takeBackup(t, dir)
	cfg := listenOnAnyPort(t, dir)
	db := cfg.DBPath(dir)
	other := initDir(t)
	stop := serveInBackground(t, dir)
	// The database through a symbolic link is the same database (a
	// review: its lock was named after the link).
	link := filepath.Join(t.TempDir(), "link.db")
	if err := os.Symlink(db, link); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"restore", "--data-dir", other, "--db", db, file},
		{"restore", "--data-dir", other, "--db", db, "--open-work-only"},
		{"repair", "--data-dir", other, "--db", db},
		{"restore", "--data-dir", other, "--db", link, file},
	} {
		code, _, stderr := runCLI(t, args...)
		if code != ExitError || !strings.Contains(stderr, "an automator serve is using the SQLite database "+args[4]) {
			t.Errorf("%s while a serve of another directory runs on the database: exit %d, stderr %q; want %d and that a serve uses it", strings.Join(args, " "), code, stderr, ExitError)
		}
	}
	if matches, _ := filepath.Glob(db + ".*"); len(matches) != 0 {
		t.Errorf("a refused restore or repair left %v", matches)
	}
	stop()
	// With the serve stopped, the restore through the other directory
	// is made (the backup holds no account key for the other directory's
	// master key to open).
	if code, _, stderr := runCLI(t, "restore", "--data-dir", other, "--db", db, file); code != 0 {
		t.Errorf("restore once the serve stopped: exit %d, stderr %q; want 0", code, stderr)
	}
}

// TestRestoreKeepsTheSignOutsMadeAfterTheBackup: a dashboard session
// signed out of after the backup was taken stays signed out once the backup
// is restored, as one signed out of before it does; a session nobody
// signed out of stays valid. The sign-out of a session expired already is
// not carried over.
func TestRestoreKeepsTheSignOutsMadeAfterTheBackup(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	secret := strings.TrimSpace(string(fileBytes(t, filepath.Join(dir, config.FileAPIKey))))
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(s *served, path string, form url.Values, ck *http.Cookie) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, s.http+path, strings.NewReader(form.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if ck != nil {
			req.AddCookie(ck)
		}
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	signIn := func(s *served) *http.Cookie {
		t.Helper()
		resp := post(s, "/dashboard/login", url.Values{"api_key": {secret}}, nil)
		if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
			t.Fatalf("sign-in: %s, cookies %v; want 303 and a session cookie", resp.Status, resp.Cookies())
		}
		return resp.Cookies()[0]
	}
	signOut := func(s *served, ck *http.Cookie) {
		t.Helper()
		if resp := post(s, "/dashboard/logout", nil, ck); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("sign-out: %s, want 303", resp.Status)
		}
	}
	// status is what the dashboard answers a session's cookie: 200 while
	// it is valid, 303 to the sign-in form once it is not.
	status := func(s *served, ck *http.Cookie) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, s.http+"/dashboard/", nil)
		req.AddCookie(ck)
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	s := serveDirInProcess(t, dir)
	before, after, kept := signIn(s), signIn(s), signIn(s)
	signOut(s, before)
	file := takeBackup(t, dir)
	signOut(s, after)
	// A sign-out of a session expired already no longer matters: not
	// carried over.
	withStore(t, dir, func(st *sqlitestore.Store) {
		if err := st.DashboardSessionEnd(t.Context(), store.DashboardSessionEndParams{ID: "expired", Expires: time.Now().Add(-time.Minute)}); err != nil {
			t.Fatal(err)
		}
	})
	for name, c := range map[string]struct {
		ck   *http.Cookie
		want int
	}{"signed out before the backup": {before, http.StatusSeeOther}, "signed out after it": {after, http.StatusSeeOther}, "never signed out": {kept, http.StatusOK}} {
		if got := status(s, c.ck); got != c.want {
			t.Fatalf("the session %s, before the restore: %d, want %d", name, got, c.want)
		}
	}
	s.stop()

	code, stdout, stderr := runCLI(t, "restore", "--data-dir", dir, file)
	if code != 0 {
		t.Fatalf("restore: exit %d: %s", code, stderr)
	}
	if want := "dashboard sign-outs made after the backup was taken, recorded again: 1"; !strings.Contains(stdout, want) {
		t.Errorf("restore printed:\n%s\nwant %q", stdout, want)
	}
	s = serveDirInProcess(t, dir)
	for name, c := range map[string]struct {
		ck   *http.Cookie
		want int
	}{"signed out before the backup": {before, http.StatusSeeOther}, "signed out after it": {after, http.StatusSeeOther}, "never signed out": {kept, http.StatusOK}} {
		if got := status(s, c.ck); got != c.want {
			t.Errorf("the session %s, after the restore: %d, want %d", name, got, c.want)
		}
	}
}

// TestServeLogsTheMigrationItMakes: serve of a database of an older schema
// migrates it as it starts, and says so in its log, from which version to
// which (a review saw one migrated with nothing said).
func TestServeLogsTheMigrationItMakes(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	cfg := listenOnAnyPort(t, dir)
	downgradeToVersion8(t, cfg.DBPath(dir))
	stop := serveInBackground(t, dir)
	log := stop()
	want := fmt.Sprintf(" db=%s from_version=8 to_version=%d", cfg.DBPath(dir), sqlitestore.LatestVersion())
	if !strings.Contains(log.String(), "msg=\"migrated the database to this binary's schema\"") || !strings.Contains(log.String(), want) {
		t.Errorf("serve's log:\n%s\nwant %s", log, want)
	}
}

// serveInBackground runs `serve --data-dir dir` until the stop it returns
// is called, and returns once it serves (its serving.yaml written). stop
// waits for it to exit, fails the test unless it exits 0, and returns its
// log.
func serveInBackground(t *testing.T, dir string) (stop func() *logtest.Buffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	log := &logtest.Buffer{}
	go func() {
		done <- Main(ctx, []string{"serve", "--data-dir", dir}, Env{Stdout: &bytes.Buffer{}, Stderr: log})
	}()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cancel()
			<-done
		}
	})
	automatortest.WaitFor(t, 15*time.Second, "serve to write serving.yaml", func() bool {
		_, ok, _ := config.ReadServing(dir)
		return ok
	})
	return func() *logtest.Buffer {
		t.Helper()
		stopped = true
		cancel()
		if code := <-done; code != 0 {
			t.Fatalf("serve exited %d:\n%s", code, log)
		}
		return log
	}
}

// TestServeSaysWhenItHasStopped: the last line serve logs, once it has
// shut down, says it has stopped; "shutting down" comes before it (a
// review: that was the last line, and said nothing of whether the
// shutdown finished), and so do the stop's own complaints: here, a
// serving.yaml replaced by something else meanwhile, which it leaves.
func TestServeSaysWhenItHasStopped(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	listenOnAnyPort(t, dir)
	stop := serveInBackground(t, dir)
	if err := os.WriteFile(filepath.Join(dir, config.FileServing), []byte("grpc: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	log := stop().String()
	if !strings.Contains(log, "removing "+config.FileServing+" at stop") {
		t.Errorf("serve's log does not say it left the serving.yaml it did not write:\n%s", log)
	}
	lines := strings.Split(strings.TrimSpace(log), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, "msg=stopped") {
		t.Fatalf("serve's last log line: %q; want it to say it stopped. Its log:\n%s", last, log)
	}
	if !strings.Contains(log, `msg="shutting down"`) {
		t.Errorf("serve's log does not say it shuts down:\n%s", log)
	}
}
