//go:build linux

package sqlitestore

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/disktest"
)

// TestFullDiskFailsWritesClearlyAndLosesNothing runs the store on a real
// file system that fills up. Every write then either commits or fails with
// store.ErrStorageFull, concurrent writes committed in one batch included;
// reads go on; once space is freed writes succeed again; and after a reopen
// every write that succeeded is there, in a database that passes SQLite's
// integrity check.
func TestFullDiskFailsWritesClearlyAndLosesNothing(t *testing.T) {
	t.Parallel()
	const (
		writers       = 8
		failuresEach  = 3    // storage-full failures each writer waits to see
		attemptsEach  = 3000 // bound on each writer's enqueues while full
		sealedCommand = 2048
	)
	dir := disktest.Small(t, 4<<20)
	path := filepath.Join(dir, "automator.db")
	ctx := t.Context()
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer func() { s.Close() }()
	if _, err := s.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte("h"), KeyID: 1, SealedKey: []byte("k"), Now: testNow}); err != nil {
		t.Fatalf("AccountCreate: %v", err)
	}
	command := bytes.Repeat([]byte{'c'}, sealedCommand)
	enqueue := func(id string) error {
		_, err := s.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: id, Account: "acme", SealedCommand: command,
			Now: testNow, Deadline: testNow.Add(time.Hour),
			Audit: &store.AuditEvent{At: testNow, Kind: store.AuditWorkQueued, Account: "acme", WorkID: id}})
		return err
	}
	if err := enqueue("before"); err != nil {
		t.Fatalf("enqueue before the disk is full: %v", err)
	}

	free := disktest.Fill(t, dir)
	var (
		mu       sync.Mutex
		stored   []string
		failures int
		other    []error
		wg       sync.WaitGroup
	)
	for g := range writers {
		wg.Go(func() {
			seen := 0
			for i := 0; i < attemptsEach && seen < failuresEach; i++ {
				id := fmt.Sprintf("full-%d-%04d", g, i)
				err := enqueue(id)
				mu.Lock()
				switch {
				case err == nil:
					stored = append(stored, id)
				case store.IsStorageFull(err):
					seen++
					failures++
				default:
					other = append(other, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, err := range other {
		t.Errorf("a write on the full disk failed with %v; want store.ErrStorageFull", err)
	}
	if failures == 0 {
		t.Fatalf("%d writes of %d bytes on a full disk, and none failed", len(stored), sealedCommand)
	}
	if w, err := s.WorkGet(ctx, "before"); err != nil || w.State != store.StateQueued {
		t.Errorf("reading a unit while the disk is full: %+v, %v; want it, queued", w, err)
	}

	free()
	if err := enqueue("after"); err != nil {
		t.Fatalf("enqueue once space is freed: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s = open(t, path)
	for _, id := range append(stored, "before", "after") {
		if _, err := s.WorkGet(ctx, id); err != nil {
			t.Errorf("unit %s, acknowledged, after a reopen: %v", id, err)
		}
	}
	var check string
	if err := s.read.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Errorf("integrity_check after the full disk: %q, %v", check, err)
	}
	t.Logf("while the disk was full: %d writes stored, %d refused as storage full", len(stored), failures)
}

// TestOpenOnAFullDiskSaysSo: a database whose disk filled up while it was
// closed does not open (SQLite cannot make its WAL index, an I/O error),
// and the error says the disk is full rather than only "disk I/O error".
// Once space is freed it opens with everything in it.
func TestOpenOnAFullDiskSaysSo(t *testing.T) {
	t.Parallel()
	dir := disktest.Small(t, 4<<20)
	path := filepath.Join(dir, "automator.db")
	createWithAcme(t, path)

	free := disktest.Fill(t, dir)
	if s, err := Open(t.Context(), path); err == nil {
		s.Close()
		t.Fatal("Open on a full disk succeeded; want it refused")
	} else if !store.IsStorageFull(err) || !strings.Contains(err.Error(), "bytes free in "+dir) {
		t.Errorf("Open on a full disk: %v; want store.ErrStorageFull, naming the free space of %s", err, dir)
	}
	free()
	s := open(t, path)
	if _, err := s.AccountGet(t.Context(), "acme"); err != nil {
		t.Errorf("the account after the full disk: %v", err)
	}
}

// TestABackupOntoAFullFileSystemSaysTheCopysIsFull: a backup whose
// destination has no room fails saying there is no room for the copy,
// naming the destination's directory and its free space, still an
// ErrStorageFull; not that the database is out of disk space, which has
// room to spare (before, it said the database was).
func TestABackupOntoAFullFileSystemSaysTheCopysIsFull(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "automator.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte("h"), KeyID: 1, SealedKey: []byte("k"), Now: testNow}); err != nil {
		t.Fatal(err)
	}
	// 400 KiB of units: more than the destination holds.
	for i := range 50 {
		if _, err := s.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: fmt.Sprintf("w%d", i), Account: "acme", KeyID: 1,
			SealedCommand: bytes.Repeat([]byte{'c'}, 8<<10), Now: testNow, Deadline: testNow.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	full := disktest.Small(t, 64<<10)
	err = s.Backup(ctx, filepath.Join(full, "backup.db"))
	if !store.IsStorageFull(err) || !strings.Contains(err.Error(), "no room for the copy") || !strings.Contains(err.Error(), "bytes free in "+full) ||
		strings.Contains(err.Error(), store.ErrStorageFull.Error()) {
		t.Fatalf("Backup onto a full file system: %v; want ErrStorageFull saying there is no room for the copy in %s, not that the database is out of space", err, full)
	}
}
