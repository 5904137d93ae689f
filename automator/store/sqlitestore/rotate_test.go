package sqlitestore

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// TestPurgedPreviousKeysLeaveTheDatabaseFiles: once AccountKeysPurge has
// deleted a previous key and the store is closed (its WAL checkpointed into
// the database), the sealed key is nowhere in the database's files, not
// even in the free space of a page: it is overwritten before its row is
// deleted, as AccountDelete does. The keys it keeps are still there.
func TestPurgedPreviousKeysLeaveTheDatabaseFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "automator.db")
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	purged, kept := bytes.Repeat([]byte("PURGED-PREVIOUS-KEY-"), 4), bytes.Repeat([]byte("KEPT-PREVIOUS-KEY-"), 4)
	current := bytes.Repeat([]byte("CURRENT-SEALED-KEY-"), 4)
	if _, err := s.AccountCreate(t.Context(), store.AccountCreateParams{Name: "acme", TokenHash: []byte("token of acme"), KeyID: 1, SealedKey: purged, Now: testNow}); err != nil {
		t.Fatal(err)
	}
	// Key 1 usable until 1h, key 2 until 3h.
	for _, r := range []store.AccountRotateParams{
		{Name: "acme", KeyID: 2, SealedKey: kept, PreviousUntil: testNow.Add(time.Hour), Now: testNow.Add(time.Minute)},
		{Name: "acme", KeyID: 3, SealedKey: current, PreviousUntil: testNow.Add(3 * time.Hour), Now: testNow.Add(2 * time.Hour)},
	} {
		if _, err := s.AccountRotate(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	// A unit queued in key 2's overlap keeps key 2, not key 1.
	if _, err := s.WorkEnqueue(t.Context(), store.WorkEnqueueParams{ID: "w", Account: "acme", KeyID: 3, SealedCommand: []byte("c"),
		Now: testNow.Add(2*time.Hour + 30*time.Minute), Deadline: testNow.Add(10 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.AccountKeysPurge(t.Context(), store.AccountKeysPurgeParams{Now: testNow.Add(100 * time.Hour), Grace: time.Hour}); err != nil || n != 1 {
		t.Fatalf("AccountKeysPurge: %d keys, %v; want key 1", n, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	all := databaseFiles(t, dir)
	if bytes.Contains(all, purged) {
		t.Error("the purged previous key is still in the database files")
	}
	if !bytes.Contains(all, kept) || !bytes.Contains(all, current) {
		t.Error("a key the purge keeps is not in the database files: the search finds nothing")
	}
}
