package storetest

import (
	"bytes"
	"fmt"
	"slices"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

var apiKeyCases = []testCase{
	{"APIKeyCreateThenGetByHash", testAPIKeyCreateThenGetByHash},
	{"APIKeyCreateWithTakenIDIsErrExists", testAPIKeyCreateWithTakenID},
	{"APIKeyListBreaksTiesByteByByte", testAPIKeyListBreaksTiesByteByByte},
	{"APIKeyNamingAnAccountTwiceHoldsItOnceAndIsRevokedWithIt", testAPIKeyNamingAnAccountTwice},
	{"APIKeyCreateForAnAccountThatDoesNotExistIsErrNotFound", testAPIKeyCreateForAMissingAccount},
}

func (f *fixture) wantAPIKey(what string, got, want store.APIKey) {
	f.t.Helper()
	if got.ID != want.ID || !bytes.Equal(got.Hash, want.Hash) || got.Name != want.Name || !got.CreatedAt.Equal(want.CreatedAt) {
		f.t.Errorf("%s = %+v, want %+v", what, got, want)
	}
}

func testAPIKeyCreateThenGetByHash(f *fixture) {
	p := store.APIKeyCreateParams{ID: "key-admin", Hash: hash("admin secret"), Name: "admin", Now: at(7 * time.Second)}
	want := store.APIKey{ID: p.ID, Hash: p.Hash, Name: p.Name, CreatedAt: p.Now}
	got, err := f.s.APIKeyCreate(f.ctx, p)
	if err != nil {
		f.t.Fatalf("APIKeyCreate: %v", err)
	}
	f.wantAPIKey("APIKeyCreate", got, want)

	other, err := f.s.APIKeyCreate(f.ctx, store.APIKeyCreateParams{ID: "key-ci", Hash: hash("ci secret"), Name: "ci", Now: at(8 * time.Second)})
	if err != nil {
		f.t.Fatalf("APIKeyCreate: %v", err)
	}

	for _, want := range []store.APIKey{want, other} {
		got, err := f.s.APIKeyGetByHash(f.ctx, want.Hash)
		if err != nil {
			f.t.Fatalf("APIKeyGetByHash(%s's hash): %v", want.ID, err)
		}
		f.wantAPIKey("APIKeyGetByHash", got, want)
	}

	_, err = f.s.APIKeyGetByHash(f.ctx, hash("a secret nobody has"))
	f.wantErr("APIKeyGetByHash of an unknown hash", err, store.ErrNotFound)
	_, err = f.s.APIKeyGetByHash(f.ctx, nil)
	f.wantErr("APIKeyGetByHash(nil)", err, store.ErrNotFound)
}

func testAPIKeyCreateWithTakenID(f *fixture) {
	first, err := f.s.APIKeyCreate(f.ctx, store.APIKeyCreateParams{ID: "key-1", Hash: hash("one"), Name: "one", Now: at(0)})
	if err != nil {
		f.t.Fatalf("APIKeyCreate: %v", err)
	}
	_, err = f.s.APIKeyCreate(f.ctx, store.APIKeyCreateParams{ID: "key-1", Hash: hash("two"), Name: "two", Now: at(time.Second)})
	f.wantErr("APIKeyCreate with a taken id", err, store.ErrExists)

	got, err := f.s.APIKeyGetByHash(f.ctx, first.Hash)
	if err != nil {
		f.t.Fatalf("APIKeyGetByHash: %v", err)
	}
	f.wantAPIKey("APIKeyGetByHash after the refused create", got, first)
	_, err = f.s.APIKeyGetByHash(f.ctx, hash("two"))
	f.wantErr("APIKeyGetByHash of the refused key", err, store.ErrNotFound)
}

// testAPIKeyListBreaksTiesByteByByte: keys created at the same moment are
// listed by id compared byte by byte, whatever the database's collation (a
// natural language's puts "k-a" before "k-B" and "kA" before "k_a"; bytes
// do the reverse), so every backend lists them in one order.
func testAPIKeyListBreaksTiesByteByByte(f *fixture) {
	ids := []string{"ka", "k_a", "kA", "k-a", "k-B", "k-b", "k-A"}
	for i, id := range ids {
		if _, err := f.s.APIKeyCreate(f.ctx, store.APIKeyCreateParams{ID: id, Hash: hash(id), Name: fmt.Sprint("key ", i), Now: at(time.Second)}); err != nil {
			f.t.Fatalf("APIKeyCreate(%q): %v", id, err)
		}
	}
	// An older key comes first whatever its id.
	if _, err := f.s.APIKeyCreate(f.ctx, store.APIKeyCreateParams{ID: "kz", Hash: hash("kz"), Name: "oldest", Now: at(0)}); err != nil {
		f.t.Fatalf("APIKeyCreate(kz): %v", err)
	}
	keys, err := f.s.APIKeyList(f.ctx)
	if err != nil {
		f.t.Fatalf("APIKeyList: %v", err)
	}
	got := make([]string, len(keys))
	for i, k := range keys {
		got[i] = k.ID
	}
	want := slices.Sorted(slices.Values(ids)) // Go compares strings byte by byte
	want = append([]string{"kz"}, want...)
	if !slices.Equal(got, want) {
		f.t.Errorf("APIKeyList ids = %q, want %q", got, want)
	}
}

// testAPIKeyNamingAnAccountTwice: a scope that names an account twice is
// stored with it once, in the order first given. Deleting that account
// then revokes a key that could use only it, rather than leave it with an
// empty scope, which is every account.
func testAPIKeyNamingAnAccountTwice(f *fixture) {
	f.account("acme")
	f.account("globex")
	twice, err := f.s.APIKeyCreate(f.ctx, store.APIKeyCreateParams{ID: "key-twice", Hash: hash("twice"), Name: "twice", Accounts: []string{"acme", "acme"}, Now: at(0)})
	if err != nil {
		f.t.Fatalf("APIKeyCreate: %v", err)
	}
	both, err := f.s.APIKeyCreate(f.ctx, store.APIKeyCreateParams{ID: "key-both", Hash: hash("both"), Name: "both", Accounts: []string{"globex", "acme", "globex"}, Now: at(0)})
	if err != nil {
		f.t.Fatalf("APIKeyCreate: %v", err)
	}
	for _, c := range []struct {
		got  store.APIKey
		want []string
	}{{twice, []string{"acme"}}, {both, []string{"globex", "acme"}}} {
		if !slices.Equal(c.got.Accounts, c.want) {
			f.t.Errorf("APIKeyCreate(%s) has accounts %q, want %q", c.got.ID, c.got.Accounts, c.want)
		}
		read, err := f.s.APIKeyGetByHash(f.ctx, c.got.Hash)
		if err != nil {
			f.t.Fatalf("APIKeyGetByHash(%s): %v", c.got.ID, err)
		}
		if !slices.Equal(read.Accounts, c.want) {
			f.t.Errorf("APIKeyGetByHash(%s) has accounts %q, want %q", c.got.ID, read.Accounts, c.want)
		}
	}
	d, err := f.s.AccountDelete(f.ctx, store.AccountDeleteParams{Name: "acme", Reason: "account deleted", Now: at(time.Minute)})
	if err != nil {
		f.t.Fatalf("AccountDelete(acme): %v", err)
	}
	if !slices.Equal(d.RevokedAPIKeys, []string{"key-twice"}) || !slices.Equal(d.NarrowedAPIKeys, []string{"key-both"}) {
		f.t.Errorf("AccountDelete(acme) revoked %q and narrowed %q; want key-twice revoked and key-both narrowed", d.RevokedAPIKeys, d.NarrowedAPIKeys)
	}
	read, err := f.s.APIKeyGetByHash(f.ctx, twice.Hash)
	if err != nil {
		f.t.Fatalf("APIKeyGetByHash(key-twice): %v", err)
	}
	if read.RevokedAt.IsZero() {
		f.t.Errorf("key-twice, whose only account was deleted, is not revoked (accounts %q, empty being every account)", read.Accounts)
	}
}

// testAPIKeyCreateForAMissingAccount: a key is stored only for accounts
// that exist when it is, checked in the transaction that stores it. A key
// made for an account deleted a moment before (its create checked, then
// the delete committed, then the key stored) would otherwise escape the
// delete, which revokes or narrows the keys it finds, and could use an
// account created later under the name.
func testAPIKeyCreateForAMissingAccount(f *fixture) {
	f.account("acme")
	f.account("globex")
	f.deleteAccount("globex", at(time.Second))
	for i, accounts := range [][]string{{"initech"}, {"acme", "initech"}, {"globex"}} {
		id := fmt.Sprint("key-", i)
		_, err := f.s.APIKeyCreate(f.ctx, store.APIKeyCreateParams{ID: id, Hash: hash(id), Name: id, Accounts: accounts, Now: at(time.Minute)})
		f.wantErr(fmt.Sprintf("APIKeyCreate for accounts %q", accounts), err, store.ErrNotFound)
		_, err = f.s.APIKeyGetByHash(f.ctx, hash(id))
		f.wantErr(fmt.Sprintf("APIKeyGetByHash of the key refused for accounts %q", accounts), err, store.ErrNotFound)
	}
	if _, err := f.s.APIKeyCreate(f.ctx, store.APIKeyCreateParams{ID: "key-acme", Hash: hash("key-acme"), Name: "acme", Accounts: []string{"acme"}, Now: at(time.Minute)}); err != nil {
		f.t.Errorf("APIKeyCreate for acme, which exists: %v", err)
	}
}
