package store_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
)

// ttl is long enough that the steps of a test between two lookups never
// take it, on the slowest machine CI gives us.
const ttl = 2 * time.Second

func hash(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }

// counting counts the credential reads that reach the store.
type counting struct {
	store.Store
	reads atomic.Int64
}

func (c *counting) AccountGetByToken(ctx context.Context, p store.AccountGetByTokenParams) (store.Account, error) {
	c.reads.Add(1)
	return c.Store.AccountGetByToken(ctx, p)
}

func (c *counting) AccountGet(ctx context.Context, name string) (store.Account, error) {
	c.reads.Add(1)
	return c.Store.AccountGet(ctx, name)
}

func (c *counting) APIKeyGetByHash(ctx context.Context, h []byte) (store.APIKey, error) {
	c.reads.Add(1)
	return c.Store.APIKeyGetByHash(ctx, h)
}

// open opens the database file at path as a separate process would: its
// own connections, its own cache.
func open(t *testing.T, path string) store.Store {
	t.Helper()
	st, err := sqlitestore.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func seed(t *testing.T, st store.Store, keys ...string) {
	t.Helper()
	ctx, now := t.Context(), time.Now()
	if _, err := st.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: hash("token 1"), KeyID: 1, SealedKey: []byte("k1"), Now: now}); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, err := st.APIKeyCreate(ctx, store.APIKeyCreateParams{ID: k, Hash: hash(k), Name: k, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
}

func mustKey(t *testing.T, st store.Store, id string) store.APIKey {
	t.Helper()
	k, err := st.APIKeyGetByHash(t.Context(), hash(id))
	if err != nil {
		t.Fatalf("APIKeyGetByHash(%s): %v", id, err)
	}
	return k
}

// TestCachedCredentialsSkipTheStore: within the ttl a credential found once
// is not read again; a credential not found is read every time (so a new
// one works at once); after the ttl it is read again.
func TestCachedCredentialsSkipTheStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.db")
	raw := open(t, path)
	seed(t, raw, "ak_1")
	spy := &counting{Store: raw}
	st := store.CachedCredentials(spy, time.Hour)
	ctx := t.Context()

	for range 3 {
		mustKey(t, st, "ak_1")
		if _, err := st.AccountGetByToken(ctx, store.AccountGetByTokenParams{TokenHash: hash("token 1"), Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.AccountGet(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
	}
	if n := spy.reads.Load(); n != 3 {
		t.Fatalf("9 lookups of 3 records within the ttl read the store %d times, want 3", n)
	}

	spy.reads.Store(0)
	for range 2 {
		if _, err := st.APIKeyGetByHash(ctx, hash("ak_new")); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown key: %v, want ErrNotFound", err)
		}
	}
	if _, err := raw.APIKeyCreate(ctx, store.APIKeyCreateParams{ID: "ak_new", Hash: hash("ak_new"), Name: "new", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	mustKey(t, st, "ak_new")
	if n := spy.reads.Load(); n != 3 {
		t.Fatalf("3 lookups of a key not found and then created read the store %d times, want 3 (failures are not cached)", n)
	}

	const short = 50 * time.Millisecond
	st = store.CachedCredentials(spy, short)
	mustKey(t, st, "ak_1")
	time.Sleep(short) // the subject: the ttl passing
	spy.reads.Store(0)
	mustKey(t, st, "ak_1")
	if n := spy.reads.Load(); n != 1 {
		t.Fatalf("a lookup after the ttl read the store %d times, want 1", n)
	}
}

// TestWithdrawalsAreExactAcrossProcesses: two automators (A, B) and a CLI
// process share one database file, each with its own cache. A revoke or a
// token rotation through a cached store returns only when no other cache
// can still serve the withdrawn credential; one through a bare store
// (which the product never uses) shows the staleness that wait prevents.
func TestWithdrawalsAreExactAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.db")
	raw := open(t, path)
	seed(t, raw, "ak_1", "ak_2", "ak_3")
	a := store.CachedCredentials(open(t, path), ttl)
	b := store.CachedCredentials(open(t, path), ttl)
	cli := store.CachedCredentials(open(t, path), ttl)
	ctx := t.Context()

	// The bare revoke: A still serves its copy. This is why withdrawals
	// wait: without the wait, the next steps would fail the same way.
	mustKey(t, a, "ak_1")
	if _, err := raw.APIKeyRevoke(ctx, store.APIKeyRevokeParams{ID: "ak_1", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if k := mustKey(t, a, "ak_1"); !k.RevokedAt.IsZero() {
		t.Fatal("A read the store again within the ttl: the cache is not in use")
	}

	// The CLI's revoke: A and B cached the key; both refuse it once the
	// revoke returned.
	mustKey(t, a, "ak_2")
	mustKey(t, b, "ak_2")
	start := time.Now()
	if _, err := cli.APIKeyRevoke(ctx, store.APIKeyRevokeParams{ID: "ak_2", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < ttl {
		t.Fatalf("the revoke returned after %v, before the ttl %v", took, ttl)
	}
	for name, st := range map[string]store.Store{"A": a, "B": b} {
		if k := mustKey(t, st, "ak_2"); k.RevokedAt.IsZero() {
			t.Errorf("%s still sees ak_2 valid after the revoke returned", name)
		}
	}

	// A revoke by A itself drops A's copy at once.
	mustKey(t, a, "ak_3")
	if _, err := a.APIKeyRevoke(ctx, store.APIKeyRevokeParams{ID: "ak_3", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if k := mustKey(t, a, "ak_3"); k.RevokedAt.IsZero() {
		t.Error("A still sees ak_3 valid after its own revoke")
	}

	// A key and token rotation with no overlap: after it returned, B
	// refuses the old token, accepts the new one and gives the new key.
	old := store.AccountGetByTokenParams{TokenHash: hash("token 1"), Now: time.Now()}
	if _, err := b.AccountGetByToken(ctx, old); err != nil {
		t.Fatal(err)
	}
	if acc, err := b.AccountGet(ctx, "acme"); err != nil || acc.KeyID != 1 {
		t.Fatalf("B, account before the rotation: key %d, %v", acc.KeyID, err)
	}
	now := time.Now()
	if _, err := cli.AccountRotate(ctx, store.AccountRotateParams{Name: "acme", TokenHash: hash("token 2"), KeyID: 2, SealedKey: []byte("k2"), PreviousUntil: now, Now: now}); err != nil {
		t.Fatal(err)
	}
	if acc, err := b.AccountGet(ctx, "acme"); err != nil || acc.KeyID != 2 {
		t.Errorf("B, account after the rotation returned: key %d, %v; want key 2", acc.KeyID, err)
	}
	old.Now = time.Now()
	if _, err := b.AccountGetByToken(ctx, old); !errors.Is(err, store.ErrExpired) && !errors.Is(err, store.ErrNotFound) {
		t.Errorf("B, old token after a rotation without overlap: %v, want it refused", err)
	}
	if a, err := b.AccountGetByToken(ctx, store.AccountGetByTokenParams{TokenHash: hash("token 2"), Now: time.Now()}); err != nil || a.Name != "acme" {
		t.Errorf("B, new token: %v, %v", a.Name, err)
	}
}

// TestCachedPreviousTokenExpiresOnTime: a previous token's window is checked
// on every lookup, a cached one too.
func TestCachedPreviousTokenExpiresOnTime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.db")
	raw := open(t, path)
	seed(t, raw)
	spy := &counting{Store: raw}
	st := store.CachedCredentials(spy, time.Hour)
	ctx := t.Context()
	now := time.Now()
	until := now.Add(time.Minute)
	if _, err := raw.AccountRotate(ctx, store.AccountRotateParams{Name: "acme", TokenHash: hash("token 2"), PreviousUntil: until, Now: now}); err != nil {
		t.Fatal(err)
	}
	a, err := st.AccountGetByToken(ctx, store.AccountGetByTokenParams{TokenHash: hash("token 1"), Now: now})
	if err != nil || !a.PreviousTokenUntil.Equal(until) {
		t.Fatalf("old token within its window: until %v, %v; want until %v", a.PreviousTokenUntil, err, until)
	}
	a, err = st.AccountGetByToken(ctx, store.AccountGetByTokenParams{TokenHash: hash("token 1"), Now: until})
	if !errors.Is(err, store.ErrExpired) || a.Name != "acme" {
		t.Fatalf("old token at the end of its window: %q, %v; want acme with ErrExpired", a.Name, err)
	}
	if n := spy.reads.Load(); n != 1 {
		t.Fatalf("read the store %d times, want 1 (the second lookup is a cached one)", n)
	}
}
