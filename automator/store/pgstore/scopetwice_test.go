package pgstore

import (
	"crypto/sha256"
	"testing"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
)

// TestAccountDeleteRevokesAKeyThatNamedItsOnlyAccountTwice: an API key
// stored before APIKeyCreate kept each account once may name its only
// account twice. Deleting that account must revoke it, as it does a key
// that named it once: narrowing it would remove both copies and leave an
// empty scope, which is every account.
func TestAccountDeleteRevokesAKeyThatNamedItsOnlyAccountTwice(t *testing.T) {
	t.Parallel()
	s := open(t, pgtest.DSN(t))
	ctx := t.Context()
	if _, err := s.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte("acme token hash"), KeyID: 1, SealedKey: []byte("k"), Now: testNow}); err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256([]byte("twice"))
	if _, err := s.APIKeyCreate(ctx, store.APIKeyCreateParams{ID: "key-twice", Hash: h[:], Name: "twice", Accounts: []string{"acme"}, Now: testNow}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE api_keys SET accounts = ARRAY['acme', 'acme'] WHERE id = 'key-twice'`); err != nil {
		t.Fatal(err)
	}
	d, err := s.AccountDelete(ctx, store.AccountDeleteParams{Name: "acme", Reason: "account deleted", Now: testNow})
	if err != nil {
		t.Fatal(err)
	}
	k, err := s.APIKeyGetByHash(ctx, h[:])
	if err != nil {
		t.Fatal(err)
	}
	if k.RevokedAt.IsZero() || len(d.RevokedAPIKeys) != 1 || len(d.NarrowedAPIKeys) != 0 {
		t.Errorf("deleting acme, the only account of a key naming it twice: revoked %q, narrowed %q, key now revoked at %v with accounts %q; want it revoked",
			d.RevokedAPIKeys, d.NarrowedAPIKeys, k.RevokedAt, k.Accounts)
	}
}
