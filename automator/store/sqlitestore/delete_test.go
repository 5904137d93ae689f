package sqlitestore

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// TestDeletedAccountsSealedKeysLeaveTheDatabaseFiles: once an account is
// deleted and the store closed (its WAL checkpointed into the database),
// neither its current nor its previous sealed key is anywhere in the
// database's files, not even in the free space of a page: they are
// overwritten before their rows are deleted. (Crypto-shredding needs the
// sealed keys gone; a copy taken before keeps them, docs/security.md.)
func TestDeletedAccountsSealedKeysLeaveTheDatabaseFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "automator.db")
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	current, previous := bytes.Repeat([]byte("CURRENT-SEALED-KEY-"), 4), bytes.Repeat([]byte("PREVIOUS-SEALED-KEY-"), 4)
	other := bytes.Repeat([]byte("OTHER-ACCOUNTS-KEY-"), 4)
	for _, a := range []struct {
		name string
		key  []byte
	}{{"acme", previous}, {"globex", other}} {
		if _, err := s.AccountCreate(t.Context(), store.AccountCreateParams{Name: a.name, TokenHash: []byte("token of " + a.name), KeyID: 1, SealedKey: a.key, Now: testNow}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.AccountRotate(t.Context(), store.AccountRotateParams{Name: "acme", KeyID: 2, SealedKey: current, PreviousUntil: testNow.Add(time.Hour), Now: testNow}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AccountDelete(t.Context(), store.AccountDeleteParams{Name: "acme", Now: testNow.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, data...)
	}
	for what, key := range map[string][]byte{"current": current, "previous": previous} {
		if bytes.Contains(all, key) {
			t.Errorf("the deleted account's %s sealed key is still in the database files", what)
		}
	}
	if !bytes.Contains(all, other) {
		t.Error("another account's sealed key is not in the database files: the search finds nothing")
	}
}
