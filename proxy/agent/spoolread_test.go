package agent

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// readFault is a spool's read hook (spool.read) that fails the reads of
// the files named in broken with EIO, as a failing disk does, until
// healed, and says so on failed (the path of a failed read; dropped when
// the last one is not taken yet).
type readFault struct {
	mu     sync.Mutex
	broken map[string]bool // base name → its reads fail
	failed chan string
}

func newReadFault(names ...string) *readFault {
	f := &readFault{broken: map[string]bool{}, failed: make(chan string, 1)}
	for _, n := range names {
		f.broken[n] = true
	}
	return f
}

func (f *readFault) read(path string) ([]byte, error) {
	f.mu.Lock()
	broken := f.broken[filepath.Base(path)]
	f.mu.Unlock()
	if broken {
		select {
		case f.failed <- path:
		default:
		}
		return nil, &fs.PathError{Op: "read", Path: path, Err: syscall.EIO}
	}
	return os.ReadFile(path)
}

func (f *readFault) heal(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.broken, name)
}

// logTap is a log the agent writes (a text handler's lines) while the
// test reads it, and waits for lines of it.
type logTap struct {
	mu    sync.Mutex
	b     bytes.Buffer
	lines chan string
}

func newLogTap() *logTap { return &logTap{lines: make(chan string, 256)} }

func (l *logTap) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.b.Write(p)
	l.mu.Unlock()
	select {
	case l.lines <- string(p):
	default: // the test reads what it waits for; String has the rest
	}
	return len(p), nil
}

func (l *logTap) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logTap) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// waitLine waits for a line holding every one of parts, and returns it.
func (l *logTap) waitLine(t *testing.T, what string, parts ...string) string {
	t.Helper()
	for {
		line := waittest.Recv(t, l.lines, what)
		found := true
		for _, p := range parts {
			found = found && strings.Contains(line, p)
		}
		if found {
			return line
		}
	}
}

// fileIs fails t unless path holds want, as it did.
func fileIs(t *testing.T, path string, want []byte, why string) {
	t.Helper()
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s: %s holds %q (%v), want it as it was, %q", why, path, got, err, want)
	}
	if _, err := os.Lstat(path + ".bad"); err == nil {
		t.Errorf("%s: %s was set aside as .bad", why, path)
	}
}

// putRecord writes the record of a result of instance "a" due at
// deadline into s, and returns its path and bytes.
func putRecord(t *testing.T, s *spool, workID string, deadline time.Time) (string, []byte) {
	t.Helper()
	e := s.put("acme", deadline, &automatorv1.CompleteRequest{WorkId: workID, ClaimId: "c", InstanceId: "a",
		Outcome: automatorv1.Outcome_OUTCOME_FAILED, Failure: "f-" + workID}, func(f func()) { f() })
	if !e.wait() {
		t.Fatalf("the record of %s was not written", workID)
	}
	data, err := os.ReadFile(e.path)
	if err != nil {
		t.Fatal(err)
	}
	return e.path, data
}

// TestARecordTheSpoolCannotReadIsLeftInPlace: at start, a record whose
// file cannot be read (EIO; a link to a directory, EISDIR) says nothing
// of its content: it was set aside as .bad, for ever, and a good result
// was never posted. It is left in place, as it was, even when its
// content is of a unit past its deadline (only its bytes could tell),
// and the log names it and what is done with it. Records that were read
// and do not decode (bad JSON, a request for another work id) are still
// set aside; the due one is loaded.
func TestARecordTheSpoolCannotReadIsLeftInPlace(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "spool")
	log := newLogTap()
	s := newSpool(dir, log.logger())
	now := time.Now()
	putRecord(t, s, "w-due", now.Add(time.Minute))
	eio, eioData := putRecord(t, s, "w-eio", now.Add(time.Minute))
	old, oldData := putRecord(t, s, "w-eio-expired", now.Add(-time.Second))
	if err := os.WriteFile(filepath.Join(dir, "w-bad.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	other, _ := json.Marshal(spooled{Version: spoolVersion, WorkID: "w-mismatch", Account: "acme", InstanceID: "a",
		Deadline: now.Add(time.Minute), Complete: mustMarshal(&automatorv1.CompleteRequest{WorkId: "w-another"})})
	if err := os.WriteFile(filepath.Join(dir, "w-mismatch.json"), other, 0o600); err != nil {
		t.Fatal(err)
	}
	// A real read error, where the platform lets a test make one: the
	// record is a link to a directory (os.ReadFile: EISDIR).
	link := filepath.Join(dir, "w-link.json")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Logf("no link to a directory here (%v): EIO only", err)
		link = ""
	}
	s.read = newReadFault("w-eio.json", "w-eio-expired.json").read

	due := s.load("a", now)
	if len(due) != 1 || due[0].req.GetWorkId() != "w-due" {
		t.Errorf("loaded %d results (%v), want the one due, w-due", len(due), due)
	}
	fileIs(t, eio, eioData, "a record that could not be read")
	fileIs(t, old, oldData, "an expired record that could not be read")
	if link != "" {
		if fi, err := os.Lstat(link); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("the record that is a link to a directory: %v, %v; want it left in place", fi, err)
		}
		if _, err := os.Lstat(link + ".bad"); err == nil {
			t.Errorf("the record that is a link to a directory was set aside as .bad")
		}
		if logged := log.String(); !strings.Contains(logged, "path="+link) || (runtime.GOOS != "windows" && !strings.Contains(logged, "is a directory")) {
			t.Errorf("the log does not say that %s could not be read (EISDIR):\n%s", link, logged)
		}
	}
	for _, name := range []string{"w-bad.json", "w-mismatch.json"} {
		if _, err := os.Stat(filepath.Join(dir, name+".bad")); err != nil {
			t.Errorf("%s, read but not a record of its work: %v; want it set aside as .bad", name, err)
		}
	}
	logged := log.String()
	for _, path := range []string{eio, old} {
		if !strings.Contains(logged, "cannot read a record in the spool; left in place") || !strings.Contains(logged, "path="+path) ||
			!strings.Contains(logged, "input/output error") {
			t.Errorf("the log does not say that %s could not be read (EIO) and was left in place:\n%s", path, logged)
		}
	}
}

// spoolReadAgent runs an agent of instance "a" that spools into dir and
// reads its records with read; stop cancels it and waits for Run to
// return.
func spoolReadAgent(t *testing.T, f *spoolAutomator, dir string, read func(string) ([]byte, error), log *slog.Logger) (stop func()) {
	t.Helper()
	a := New(Options{
		tune:   testTuning(t),
		Client: f, Keys: crypto.Keys{testKey}, InstanceID: "a", ScriptsDir: t.TempDir(),
		MaxConcurrency: 1, PollWait: time.Second, GracePeriod: 20 * time.Millisecond,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger: log, SpoolDir: dir,
	})
	a.spool.read = read
	return runInBackground(t, a)
}

// TestARecordThatBecomesReadableIsPostedInTheSameRun: a record the start
// could not read is read again while the proxy runs; once it reads (the
// disk back), its result is posted, before its deadline, and its file
// removed, without waiting for another restart.
func TestARecordThatBecomesReadableIsPostedInTheSameRun(t *testing.T) {
	t.Parallel()
	tn := tuned(t)
	tn.rereadFirst, tn.rereadMax = time.Millisecond, 10*time.Millisecond
	dir := filepath.Join(t.TempDir(), "spool")
	log := newLogTap()
	path, data := putRecord(t, newSpool(dir, slog.New(slog.DiscardHandler)), "w-due", time.Now().Add(time.Minute))
	fault := newReadFault("w-due.json")
	f := newSpoolAutomator(func(*automatorv1.CompleteRequest) error { return nil })
	spoolReadAgent(t, f, dir, fault.read, log.logger())

	waittest.Recv(t, fault.failed, "the start to read the spooled record")
	waittest.Recv(t, fault.failed, "the spooled record the start could not read to be read again")
	fileIs(t, path, data, "while it cannot be read")
	if n := f.callCount(); n != 0 {
		t.Fatalf("%d Complete calls while the record could not be read, want 0", n)
	}
	fault.heal("w-due.json")
	got := waittest.Recv(t, f.ok, "the result of the record that reads again to be posted")
	if got.GetWorkId() != "w-due" || got.GetFailure() != "f-w-due" {
		t.Fatalf("posted %v, want the spooled result of w-due", got)
	}
	log.waitLine(t, "the log to say the record reads now", "reads now", "path="+path)
	waittest.Until(t, "the posted result to leave the spool", func() bool { return len(spoolFiles(t, dir)) == 0 })
}

// TestStopEndsTheReadsOfAnUnreadableRecord: the reads again end with the
// agent's stop, which does not wait for them; the record stays in place
// for the next start, and the log says so.
func TestStopEndsTheReadsOfAnUnreadableRecord(t *testing.T) {
	t.Parallel()
	tuned(t).rereadFirst = time.Hour // the stop comes first
	dir := filepath.Join(t.TempDir(), "spool")
	log := newLogTap()
	path, data := putRecord(t, newSpool(dir, slog.New(slog.DiscardHandler)), "w-due", time.Now().Add(time.Minute))
	fault := newReadFault("w-due.json")
	f := newSpoolAutomator(func(*automatorv1.CompleteRequest) error { return nil })
	stop := spoolReadAgent(t, f, dir, fault.read, log.logger())
	waittest.Recv(t, fault.failed, "the start to read the spooled record")
	stop() // fails the test unless Run returns within waittest.Bound
	fileIs(t, path, data, "after a stop")
	if !strings.Contains(log.String(), "stopping with a record in the spool that could not be read; left in place: the next start reads it again") {
		t.Errorf("the log does not say the unread record is left for the next start:\n%s", log.String())
	}
}

// TestAnUnreadableRecordIsReadAgainOnlyWithinItsWindow: a record that
// stays unreadable is read again for a bounded time only (the longest
// timeout a unit may have, shortened here), then left in place for the
// next start, as the log says.
func TestAnUnreadableRecordIsReadAgainOnlyWithinItsWindow(t *testing.T) {
	t.Parallel()
	tn := tuned(t)
	tn.rereadFirst, tn.rereadMax, tn.rereadFor = time.Millisecond, 5*time.Millisecond, 50*time.Millisecond
	dir := filepath.Join(t.TempDir(), "spool")
	log := newLogTap()
	path, data := putRecord(t, newSpool(dir, slog.New(slog.DiscardHandler)), "w-due", time.Now().Add(time.Minute))
	f := newSpoolAutomator(func(*automatorv1.CompleteRequest) error { return nil })
	spoolReadAgent(t, f, dir, newReadFault("w-due.json").read, log.logger())
	line := log.waitLine(t, "the log to say the record is left for the next start", "still cannot be read", "path="+path)
	if !strings.Contains(line, "input/output error") {
		t.Errorf("the log line %q does not give the read's error", line)
	}
	fileIs(t, path, data, "once the reads again are over")
}

// TestAnUnreadableLostPollsRecordIsNotWrittenOver: the spool's record of
// lost polls, which the start cannot read, is left in place (it was set
// aside, its polls never reported), and the stop's record of this run's
// lost polls is not written over it, which would lose the records it
// holds (another instance's, an earlier run's of this one). Once it
// reads, a save keeps them all.
func TestAnUnreadableLostPollsRecordIsNotWrittenOver(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "spool")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	hourAgo := time.Now().Add(-time.Hour).UTC()
	held, err := json.Marshal([]lostPolls{
		{Version: 1, InstanceID: "b", Run: "RUNB", From: 3, Seq: 5, StoppedAt: hourAgo},
		{Version: 1, InstanceID: "a", Run: "OLDA", From: 7, Seq: 9, StoppedAt: hourAgo},
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, LostPollsName)
	if err := os.WriteFile(path, held, 0o600); err != nil {
		t.Fatal(err)
	}
	log := newLogTap()
	a := New(Options{tune: testTuning(t), Keys: crypto.Keys{testKey}, InstanceID: "a", SpoolDir: dir, Logger: log.logger()})
	fault := newReadFault(LostPollsName)
	a.spool.read = fault.read

	a.loadEarlier()
	if len(a.earlier) != 0 {
		t.Fatalf("loaded %v from a record that cannot be read", a.earlier)
	}
	fileIs(t, path, held, "the start could not read it")
	a.keepLost(11, 10, nil)
	fileIs(t, path, held, "the stop kept this run's lost polls while it could not be read")
	if logged := log.String(); !strings.Contains(logged, "not written over") || !strings.Contains(logged, "cannot keep in the spool the polls") {
		t.Errorf("the log does not say the stop's record was not written over the unread one:\n%s", logged)
	}

	fault.heal(LostPollsName)
	if err := a.saveEarlier(); err != nil {
		t.Fatal(err)
	}
	mine, others := a.spool.loadLost("a")
	runs := map[string]bool{}
	for _, l := range append(mine, others...) {
		runs[l.Run] = true
	}
	if len(mine)+len(others) != 3 || !runs["RUNB"] || !runs["OLDA"] || !runs[a.run] {
		t.Fatalf("once it reads, the record saved holds %v and %v; want another instance's (RUNB), the earlier run's (OLDA) and this run's (%s), each once", mine, others, a.run)
	}
}

// TestAnUnreadableLostPollsRecordIsKeptByARun: an agent that runs and
// stops with the spool's record of lost polls unreadable leaves it as it
// was, neither set aside nor written over.
func TestAnUnreadableLostPollsRecordIsKeptByARun(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "spool")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	held := []byte(`[{"version":1,"instance_id":"a","run_id":"OLDA","lost_from":3,"poll_seq":5,"stopped_at":"` +
		time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano) + `"}]` + "\n")
	path := filepath.Join(dir, LostPollsName)
	if err := os.WriteFile(path, held, 0o600); err != nil {
		t.Fatal(err)
	}
	fault := newReadFault(LostPollsName)
	f := newSpoolAutomator(func(*automatorv1.CompleteRequest) error { return nil })
	stop := spoolReadAgent(t, f, dir, fault.read, slog.New(slog.DiscardHandler))
	waittest.Recv(t, fault.failed, "the start to read the record of lost polls")
	stop()
	fileIs(t, path, held, "after a run that could not read it")
}

// TestALostPollsRecordThatDoesNotDecodeIsSetAside: a record of lost polls
// that was read and is not one is set aside as before.
func TestALostPollsRecordThatDoesNotDecodeIsSetAside(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "spool")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, LostPollsName)
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newSpool(dir, slog.New(slog.DiscardHandler))
	if mine, others := s.loadLost("a"); len(mine)+len(others) != 0 {
		t.Fatalf("loaded %v, %v from a record that does not decode", mine, others)
	}
	if _, err := os.Stat(path + ".bad"); err != nil {
		t.Fatalf("the record that does not decode: %v; want it set aside as .bad", err)
	}
}
