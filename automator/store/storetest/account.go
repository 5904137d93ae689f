package storetest

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

var accountCases = []testCase{
	{"AccountCreateThenGet", testAccountCreateThenGet},
	{"AccountCreateWithTakenNameIsErrExists", testAccountCreateWithTakenName},
	{"AccountGetUnknownIsErrNotFound", testAccountGetUnknown},
	{"AccountGetByTokenHash", testAccountGetByTokenHash},
	{"AccountListIsOrderedByName", testAccountListIsOrderedByName},
}

func (f *fixture) wantAccount(what string, got, want store.Account) {
	f.t.Helper()
	if got.Name != want.Name || !bytes.Equal(got.TokenHash, want.TokenHash) || got.KeyID != want.KeyID ||
		!bytes.Equal(got.SealedKey, want.SealedKey) || !got.CreatedAt.Equal(want.CreatedAt) {
		f.t.Errorf("%s = %s, want %s", what, fmtAccount(got), fmtAccount(want))
	}
}

func fmtAccount(a store.Account) string {
	return fmt.Sprintf("{Name %q, TokenHash %x, KeyID %d, SealedKey %x, CreatedAt %v}",
		a.Name, a.TokenHash, a.KeyID, a.SealedKey, a.CreatedAt)
}

func testAccountCreateThenGet(f *fixture) {
	p := store.AccountCreateParams{
		Name:      "acme",
		TokenHash: hash("acme token"),
		KeyID:     math.MaxUint32,                 // the whole uint32 range survives
		SealedKey: []byte{0, 1, 0xfe, 0xff, 0, 0}, // binary, with NULs
		Now:       base,
	}
	want := store.Account{Name: p.Name, TokenHash: p.TokenHash, KeyID: p.KeyID, SealedKey: p.SealedKey, CreatedAt: base}

	got, err := f.s.AccountCreate(f.ctx, p)
	if err != nil {
		f.t.Fatalf("AccountCreate: %v", err)
	}
	f.wantAccount("AccountCreate", got, want)

	got, err = f.s.AccountGet(f.ctx, "acme")
	if err != nil {
		f.t.Fatalf("AccountGet: %v", err)
	}
	f.wantAccount("AccountGet", got, want)
}

func testAccountCreateWithTakenName(f *fixture) {
	first := f.account("acme")
	_, err := f.s.AccountCreate(f.ctx, store.AccountCreateParams{
		Name:      "acme",
		TokenHash: hash("another token"),
		KeyID:     2,
		SealedKey: []byte("another key"),
		Now:       at(time.Second),
	})
	f.wantErr("AccountCreate with a taken name", err, store.ErrExists)

	got, err := f.s.AccountGet(f.ctx, "acme")
	if err != nil {
		f.t.Fatalf("AccountGet: %v", err)
	}
	f.wantAccount("AccountGet after the refused create", got, first)
}

func testAccountGetUnknown(f *fixture) {
	_, err := f.s.AccountGet(f.ctx, "nobody")
	f.wantErr("AccountGet of an unknown name", err, store.ErrNotFound)

	f.account("acme")
	_, err = f.s.AccountGet(f.ctx, "ACME")
	f.wantErr("AccountGet with another case", err, store.ErrNotFound)
	// Names no account can have (a command line's bytes): not found
	// either, where PostgreSQL refuses such text in a query.
	for _, name := range []string{"\xff", "ac\x00me"} {
		_, err = f.s.AccountGet(f.ctx, name)
		f.wantErr("AccountGet of "+strconv.Quote(name), err, store.ErrNotFound)
	}
}

func testAccountGetByTokenHash(f *fixture) {
	acme := f.account("acme")
	globex := f.account("globex")

	for _, want := range []store.Account{acme, globex} {
		got, err := f.s.AccountGetByTokenHash(f.ctx, want.TokenHash)
		if err != nil {
			f.t.Fatalf("AccountGetByTokenHash(%s's hash): %v", want.Name, err)
		}
		f.wantAccount("AccountGetByTokenHash", got, want)
	}

	_, err := f.s.AccountGetByTokenHash(f.ctx, hash("a token nobody has"))
	f.wantErr("AccountGetByTokenHash of an unknown hash", err, store.ErrNotFound)
	_, err = f.s.AccountGetByTokenHash(f.ctx, nil)
	f.wantErr("AccountGetByTokenHash(nil)", err, store.ErrNotFound)
}

func testAccountListIsOrderedByName(f *fixture) {
	got, err := f.s.AccountList(f.ctx)
	if err != nil {
		f.t.Fatalf("AccountList on an empty store: %v", err)
	}
	if len(got) != 0 {
		f.t.Fatalf("AccountList on an empty store returned %d accounts", len(got))
	}

	charlie := f.account("charlie")
	alpha := f.account("alpha")
	bravo := f.account("bravo")
	want := []store.Account{alpha, bravo, charlie}

	got, err = f.s.AccountList(f.ctx)
	if err != nil {
		f.t.Fatalf("AccountList: %v", err)
	}
	if len(got) != len(want) {
		f.t.Fatalf("AccountList returned %d accounts, want %d", len(got), len(want))
	}
	for i := range want {
		f.wantAccount(fmt.Sprintf("AccountList[%d]", i), got[i], want[i])
	}
}
