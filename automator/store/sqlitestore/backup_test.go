package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/waittest"
)

// TestBackupIsAConsistentCopyWhileWritesGoOn: a backup taken while units
// are queued and claimed holds whole units only, opens as a store of its
// own, and is one file without a write-ahead log.
func TestBackupIsAConsistentCopyWhileWritesGoOn(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	s := open(t, filepath.Join(dir, "automator.db"))
	if _, err := s.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte("t"), KeyID: 1, SealedKey: []byte("k"), Now: testNow}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	some := make(chan struct{}) // closed once 50 units are in
	var wg sync.WaitGroup
	var enqueued int
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				enqueued = i
				return
			default:
			}
			if i == 50 {
				close(some)
			}
			if _, err := s.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: fmt.Sprintf("w-%06d", i), Account: "acme", KeyID: 1,
				SealedCommand: []byte("c"), Now: testNow, Deadline: testNow.Add(time.Hour)}); err != nil {
				t.Errorf("WorkEnqueue: %v", err)
				return
			}
			if i%2 == 0 {
				if _, err := s.WorkClaim(ctx, store.WorkClaimParams{Account: "acme", InstanceID: "i-1", Max: 1, ClaimIDs: []string{fmt.Sprintf("c-%d", i)}, Now: testNow}); err != nil {
					t.Errorf("WorkClaim: %v", err)
					return
				}
			}
		}
	})
	// Let some writes land first, so the copy is taken among them.
	waittest.Recv(t, some, "50 units to be enqueued")
	copyPath := filepath.Join(dir, "backup.db")
	if err := s.Backup(ctx, copyPath); err != nil {
		t.Fatalf("Backup: %v", err)
	}
	close(stop)
	wg.Wait()

	if _, err := os.Stat(copyPath + "-wal"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the copy has a write-ahead log beside it (stat: %v); want one self-contained file", err)
	}
	snap, err := Inspect(ctx, copyPath, "the copy")
	if err != nil || snap.Version != migrations[len(migrations)-1].version {
		t.Fatalf("Inspect of the copy: version %d, %v; want the latest version and no error", snap.Version, err)
	}
	c := open(t, copyPath)
	ws, err := c.WorkList(ctx, store.WorkListParams{Limit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) < 50 || len(ws) > enqueued {
		t.Fatalf("the copy holds %d units; want between 50 and the %d enqueued", len(ws), enqueued)
	}
	for _, w := range ws {
		if w.State != store.StateQueued && w.State != store.StateClaimed {
			t.Errorf("unit %s is %s in the copy", w.ID, w.State)
		}
		if w.State == store.StateClaimed && w.ClaimID == "" {
			t.Errorf("unit %s is claimed without a claim id: half a write", w.ID)
		}
	}
}

// TestInspectSaysWhatAFileIsNot: a restore is refused, with a precise
// reason, for a file that is not SQLite's, an SQLite database that is not
// an automator's, and one of a newer schema; an older schema is fine.
func TestInspectSaysWhatAFileIsNot(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	other := filepath.Join(dir, "other.db")
	db, err := sql.Open("sqlite", other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE notes (body TEXT)`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	newer := filepath.Join(dir, "newer.db")
	s, err := Open(ctx, newer)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.writeTx(ctx, func(ctx context.Context, tx querier) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES (999, 0)`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	older := filepath.Join(dir, "older.db")
	odb, err := sql.Open("sqlite", dsn(older, false))
	if err != nil {
		t.Fatal(err)
	}
	if err := migrateWith(ctx, odb, migrations[:2]); err != nil {
		t.Fatal(err)
	}
	odb.Close()

	for _, c := range []struct {
		path      string
		want      string
		notAutoDB bool
	}{
		{write("text.db", "name: not a database\n"), "is not an SQLite database", true},
		{write("empty.db", ""), "is not an SQLite database", true},
		{other, "is an SQLite database but not an automator's", true},
		{newer, "is at version 999, newer than this binary knows", false},
	} {
		_, err := Inspect(ctx, c.path, c.path)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) {
			t.Errorf("Inspect(%s) = %v; want an error naming the file and saying %q", filepath.Base(c.path), err, c.want)
		}
		if errors.Is(err, ErrNotAutomatorDB) != c.notAutoDB {
			t.Errorf("Inspect(%s) = %v: matches ErrNotAutomatorDB %v, want %v", filepath.Base(c.path), err, !c.notAutoDB, c.notAutoDB)
		}
	}
	if snap, err := Inspect(ctx, older, older); err != nil || snap.Version != 2 {
		t.Errorf("Inspect of a database at version 2 = %d, %v; want 2 and no error (serve migrates it)", snap.Version, err)
	}
}
