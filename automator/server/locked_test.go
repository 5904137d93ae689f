package server_test

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/internal/loglimit"
	"github.com/opsgate/opsgate/internal/sqlitetest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestADatabaseLockedByAnotherProgramIsUnavailableAndSaysSo: while another
// program holds the SQLite database in a write transaction (a sqlite3
// shell's BEGIN IMMEDIATE, here a connection of the test's own), a caller
// that queues work is told the database is locked by another program and
// that nothing was stored, with Unavailable, which it may retry, rather
// than an internal error; the failure is counted as kind "locked", and the
// log has at most loglimit.DefaultLines lines of it a minute, not one per
// call (a review: 74 "internal error" lines in 130 s). Each call waits the
// store's 5 s for the lock first.
func TestADatabaseLockedByAnotherProgramIsUnavailableAndSaysSo(t *testing.T) {
	t.Parallel()
	var log syncLog
	m := &storeFailures{}
	e := newEnv(t, envOptions{log: &log, metrics: m, clock: newFakeClock(), sweepInterval: time.Hour})
	tx := sqlitetest.Lock(t, e.dbPath)
	const calls = loglimit.DefaultLines + 2
	errs := make(chan error, calls)
	for range calls {
		go func() {
			_, err := e.callerClient().Submit(t.Context(), &automatorv1.ExecuteRequest{Account: e.account,
				Command: &automatorv1.Command{Script: "@ping"}, Timeout: durationpb.New(time.Minute)})
			errs <- err
		}()
	}
	for range calls {
		err := <-errs
		if st := status.Convert(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "database is locked by another program while queueing work: nothing was stored") {
			t.Fatalf("Submit while another program holds the database: %v; want Unavailable saying the database is locked by another program and nothing was stored", err)
		}
	}
	if n := m.count(server.StoreErrorLocked); n < calls {
		t.Errorf("%d store errors of kind %s counted for %d calls, want at least %d", n, server.StoreErrorLocked, calls, calls)
	}
	if n := len(log.lines("locked by another program")); n > loglimit.DefaultLines {
		t.Errorf("%d lines for %d calls within a minute, want at most %d", n, calls, loglimit.DefaultLines)
	}
	if n := len(log.lines("internal error")); n > 0 {
		t.Errorf("%d internal error lines; want none:\n%s", n, log.lines("internal error"))
	}
	const over = "the database takes writes again: the program that held it locked has let go"
	if n := len(log.lines(over)); n != 0 {
		t.Errorf("the end of the lock said while it lasts:\n%s", log.lines(over))
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := e.callerClient().Submit(t.Context(), &automatorv1.ExecuteRequest{Account: e.account,
			Command: &automatorv1.Command{Script: "@ping"}, Timeout: durationpb.New(time.Minute)}); err != nil {
			t.Fatalf("Submit once the other program let go: %v", err)
		}
	}
	// Its end is said, once, though its lines used up their bound (a
	// re-review: the next minute's count of them read as still locked).
	if n := len(log.lines(over)); n != 1 {
		t.Errorf("%d lines say the lock is over, want 1:\n%s", n, log.lines())
	}
}

// TestTheAutomatorsOwnWritesOnALockedDatabaseSayWhatToDo: the writes no
// caller is told of (the sweeper's, the instances' polls') that find the
// database locked by another program are logged as such, within the
// lock's bound of lines and naming where to look, not as bare errors
// (a review: one every 5 to 10 s for as long as the lock lasted), and
// the lock's end is said once it lets go, with nothing queued.
func TestTheAutomatorsOwnWritesOnALockedDatabaseSayWhatToDo(t *testing.T) {
	t.Parallel()
	var log syncLog
	e := newEnv(t, envOptions{log: &log, sweepInterval: 100 * time.Millisecond})
	tx := sqlitetest.Lock(t, e.dbPath)
	said := log.awaitLines(t, "the sweeper's write to be logged as one that found the database locked",
		"the database is locked by another program", "doing=")
	if !strings.Contains(said[0], "look for a process that holds the database file open") {
		t.Errorf("the line %q does not say where to look", said[0])
	}
	if got := log.lines("level=ERROR", "err=", "database is locked"); len(got) != len(log.lines("level=ERROR", "err=", "database is locked", "locked by another program")) {
		t.Errorf("bare error lines of the lock: %q", got)
	}
	// Its end is said by the sweeper's next write, though nothing is
	// queued or polled (a re-review: never, on an idle automator).
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	log.awaitLines(t, "the end of the lock to be said", "the database takes writes again: the program that held it locked has let go")
}
