package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// Cases of credential rotation, API key scopes and revocation, the audit
// log and the queue count (docs/security.md).
var securityCases = []testCase{
	{"PreviousTokenWorksUntilItsOverlapEnds", testPreviousTokenWorksUntilItsOverlapEnds},
	{"TokenRotationWithoutOverlapRefusesTheOldTokenAtOnce", testTokenRotationWithoutOverlap},
	{"SeveralPreviousTokensKeepTheirOwnWindows", testSeveralPreviousTokens},
	{"RotationWithoutOverlapEndsEveryEarlierWindow", testRotationWithoutOverlapEndsEveryWindow},
	{"AccountRotateOfUnknownAccountIsErrNotFound", testAccountRotateUnknown},
	{"KeyRotationKeepsPreviousKeysNewestFirst", testKeyRotationKeepsPreviousKeys},
	{"KeyRotationRefusesAnIDNotAboveEveryEarlierOne", testKeyRotationRefusesOldIDs},
	{"ConcurrentKeyRotationsEachMakeOneVersion", testConcurrentKeyRotations},
	{"APIKeyScopesAndRevocation", testAPIKeyScopesAndRevocation},
	{"APIKeyRevokeOfUnknownIsErrNotFound", testAPIKeyRevokeUnknown},
	{"AuditAppendThenListInOrder", testAuditAppendThenList},
	{"AuditListSinceReturnsEveryEventFromThenOnEvenStampedOutOfOrder", testAuditListSince},
	{"AuditListKeepsTheEventsOfAnAccountAUnitAndSomeKinds", testAuditListFilters},
	{"AuditPurgeDeletesTheOldEventsOnRecord", testAuditPurge},
	{"AuditPurgeKeepsTheNewestEvent", testAuditPurgeKeepsTheNewestEvent},
	{"WorkEnqueueAppendsItsAuditEventWithTheUnitOnly", testWorkEnqueueAppendsAudit},
	{"WorkQueuedCountCountsQueuedUnitsOfTheAccount", testWorkQueuedCount},
	{"UnitEndsAppendTheirAuditEventInTheSameWrite", testUnitEndsAppendAudit},
	{"AdministrativeChangesAppendTheirAuditEventOnlyWhenMade", testAdminChangesAppendAudit},
	{"AnAdministrativeChangeWhoseAuditEventFailsIsNotMade", testAdminChangeWithFailingAudit},
}

func (f *fixture) byToken(h []byte, now time.Time) (store.Account, error) {
	return f.s.AccountGetByToken(f.ctx, store.AccountGetByTokenParams{TokenHash: h, Now: now})
}

func (f *fixture) rotate(p store.AccountRotateParams) store.Account {
	f.t.Helper()
	a, err := f.s.AccountRotate(f.ctx, p)
	if err != nil {
		f.t.Fatalf("AccountRotate(%+v): %v", p, err)
	}
	return a
}

func testPreviousTokenWorksUntilItsOverlapEnds(f *fixture) {
	acme := f.account("acme")
	f.account("globex")
	old, fresh := acme.TokenHash, hash("acme token 2")
	if a, err := f.byToken(old, at(0)); err != nil || a.Name != "acme" {
		f.t.Fatalf("AccountGetByToken(current) = %q, %v; want acme", a.Name, err)
	}
	got := f.rotate(store.AccountRotateParams{Name: "acme", TokenHash: fresh, PreviousUntil: at(time.Hour), Now: at(time.Minute)})
	if !bytes.Equal(got.TokenHash, fresh) || got.KeyID != acme.KeyID || !bytes.Equal(got.SealedKey, acme.SealedKey) {
		f.t.Errorf("AccountRotate of the token = %s; want the new token and the key unchanged", fmtAccount(got))
	}
	for _, c := range []struct {
		what string
		h    []byte
		now  time.Time
		want error
	}{
		{"the new token", fresh, at(2 * time.Hour), nil},
		{"the old token inside its window", old, at(time.Hour - time.Microsecond), nil},
		{"the old token at the end of its window", old, at(time.Hour), store.ErrExpired},
		{"the old token after its window", old, at(48 * time.Hour), store.ErrExpired},
	} {
		a, err := f.byToken(c.h, c.now)
		if c.want == nil && err != nil {
			f.t.Errorf("AccountGetByToken(%s): %v, want acme", c.what, err)
			continue
		}
		f.wantErr("AccountGetByToken("+c.what+")", err, c.want)
		if a.Name != "acme" || !bytes.Equal(a.TokenHash, fresh) {
			f.t.Errorf("AccountGetByToken(%s) = %s; want acme with its new token", c.what, fmtAccount(a))
		}
		wantUntil := at(time.Hour) // the end of the old token's window
		if bytes.Equal(c.h, fresh) {
			wantUntil = time.Time{}
		}
		if !a.PreviousTokenUntil.Equal(wantUntil) {
			f.t.Errorf("AccountGetByToken(%s): PreviousTokenUntil = %v, want %v", c.what, a.PreviousTokenUntil, wantUntil)
		}
	}
	// The old token is no longer the current one.
	_, err := f.s.AccountGetByTokenHash(f.ctx, old)
	f.wantErr("AccountGetByTokenHash(old token)", err, store.ErrNotFound)
	_, err = f.byToken(hash("nobody's token"), at(0))
	f.wantErr("AccountGetByToken(unknown)", err, store.ErrNotFound)
	_, err = f.byToken(nil, at(0))
	f.wantErr("AccountGetByToken(nil)", err, store.ErrNotFound)
}

func testTokenRotationWithoutOverlap(f *fixture) {
	acme := f.account("acme")
	f.rotate(store.AccountRotateParams{Name: "acme", TokenHash: hash("t2"), PreviousUntil: at(time.Minute), Now: at(time.Minute)})
	_, err := f.byToken(acme.TokenHash, at(time.Minute))
	if err == nil {
		f.t.Errorf("AccountGetByToken(old token) after a rotation without overlap succeeded")
	}
	// Taking another account's token is refused, and changes nothing.
	globex := f.account("globex")
	_, err = f.s.AccountRotate(f.ctx, store.AccountRotateParams{Name: "acme", TokenHash: globex.TokenHash, Now: at(2 * time.Minute)})
	f.wantErr("AccountRotate to another account's token", err, store.ErrExists)
	if a, err := f.byToken(hash("t2"), at(3*time.Minute)); err != nil || a.Name != "acme" {
		f.t.Errorf("after the refused rotation, AccountGetByToken(t2) = %q, %v; want acme", a.Name, err)
	}
}

func testSeveralPreviousTokens(f *fixture) {
	acme := f.account("acme")
	f.rotate(store.AccountRotateParams{Name: "acme", TokenHash: hash("t2"), PreviousUntil: at(10 * time.Minute), Now: at(0)})
	f.rotate(store.AccountRotateParams{Name: "acme", TokenHash: hash("t3"), PreviousUntil: at(20 * time.Minute), Now: at(time.Minute)})
	for _, c := range []struct {
		h   []byte
		now time.Time
		ok  bool
	}{
		{acme.TokenHash, at(9 * time.Minute), true},
		{acme.TokenHash, at(10 * time.Minute), false},
		{hash("t2"), at(19 * time.Minute), true},
		{hash("t2"), at(20 * time.Minute), false},
		{hash("t3"), at(time.Hour), true},
	} {
		_, err := f.byToken(c.h, c.now)
		if (err == nil) != c.ok {
			f.t.Errorf("AccountGetByToken(%x…) at %v: %v, want ok=%v", c.h[:4], c.now.Sub(base), err, c.ok)
		}
	}
}

// testRotationWithoutOverlapEndsEveryWindow: a rotation with no overlap
// leaves only the new profile working, not also the profiles of earlier
// rotations whose windows are still open (the answer to a leaked profile).
func testRotationWithoutOverlapEndsEveryWindow(f *fixture) {
	acme := f.account("acme") // token of acme, key 1
	f.account("globex")
	f.rotate(store.AccountRotateParams{Name: "acme", TokenHash: hash("t2"), KeyID: 2, SealedKey: []byte("k2"), PreviousUntil: at(time.Hour), Now: at(0)})
	f.rotate(store.AccountRotateParams{Name: "acme", TokenHash: hash("t3"), PreviousUntil: at(time.Hour), Now: at(time.Minute)})
	// The answer to a leak: a new token and key, no overlap.
	f.rotate(store.AccountRotateParams{Name: "acme", TokenHash: hash("t4"), KeyID: 3, SealedKey: []byte("k3"), PreviousUntil: at(2 * time.Minute), Now: at(2 * time.Minute)})
	for _, h := range [][]byte{acme.TokenHash, hash("t2")} {
		_, err := f.byToken(h, at(2*time.Minute))
		f.wantErr(fmt.Sprintf("AccountGetByToken(%x…) of an earlier rotation's token after a rotation without overlap", h[:4]), err, store.ErrNotFound)
	}
	// The token it replaced is refused as expired, naming its account: a
	// proxy still polling with it is told to install the new profile, and
	// listed refused (before, it was refused as unknown, and listed
	// online, then offline).
	if a, err := f.byToken(hash("t3"), at(2*time.Minute)); !errors.Is(err, store.ErrExpired) || a.Name != "acme" {
		f.t.Errorf("AccountGetByToken(t3) after the rotation without overlap that replaced it = %q, %v; want acme, ErrExpired", a.Name, err)
	}
	// Also to a replica whose clock is behind the rotating host's: the
	// token was withdrawn at once, on every clock.
	if a, err := f.byToken(hash("t3"), at(time.Minute)); !errors.Is(err, store.ErrExpired) {
		f.t.Errorf("AccountGetByToken(t3) on a clock a minute behind the rotation without overlap = %q, %v; want ErrExpired", a.Name, err)
	}
	if a, err := f.byToken(hash("t4"), at(2*time.Minute)); err != nil || a.KeyID != 3 {
		f.t.Errorf("AccountGetByToken(t4) = %s, %v; want acme with key 3", fmtAccount(a), err)
	}
	keys, err := f.s.AccountKeys(f.ctx, "acme")
	if err != nil {
		f.t.Fatal(err)
	}
	for _, k := range keys {
		if usable := k.Usable(at(2 * time.Minute)); usable != (k.KeyID == 3) {
			f.t.Errorf("key %d usable after a rotation without overlap: %v (until %v); want only key 3", k.KeyID, usable, k.UsableUntil.Sub(base))
		}
	}
	// Another account's windows are its own.
	f.rotate(store.AccountRotateParams{Name: "globex", TokenHash: hash("g2"), PreviousUntil: at(time.Hour), Now: at(0)})
	f.rotate(store.AccountRotateParams{Name: "acme", TokenHash: hash("t5"), Now: at(3 * time.Minute)})
	if a, err := f.byToken(hash("token of globex"), at(3*time.Minute)); err != nil || a.Name != "globex" {
		f.t.Errorf("globex's previous token after acme's rotation without overlap: %q, %v; want globex", a.Name, err)
	}
}

func testAccountRotateUnknown(f *fixture) {
	_, err := f.s.AccountRotate(f.ctx, store.AccountRotateParams{Name: "nobody", TokenHash: hash("x"), Now: at(0)})
	f.wantErr("AccountRotate of an unknown account", err, store.ErrNotFound)
	_, err = f.s.AccountKeys(f.ctx, "nobody")
	f.wantErr("AccountKeys of an unknown account", err, store.ErrNotFound)
}

func testKeyRotationKeepsPreviousKeys(f *fixture) {
	acme := f.account("acme") // key 1
	keys, err := f.s.AccountKeys(f.ctx, "acme")
	if err != nil {
		f.t.Fatal(err)
	}
	if len(keys) != 1 || keys[0].KeyID != 1 || !keys[0].Current || !bytes.Equal(keys[0].SealedKey, acme.SealedKey) {
		f.t.Fatalf("AccountKeys before rotation = %+v; want the current key 1", keys)
	}
	got := f.rotate(store.AccountRotateParams{Name: "acme", KeyID: 2, SealedKey: []byte("sealed key 2"), PreviousUntil: at(time.Hour), Now: at(time.Minute)})
	if got.KeyID != 2 || !bytes.Equal(got.SealedKey, []byte("sealed key 2")) || !bytes.Equal(got.TokenHash, acme.TokenHash) {
		f.t.Errorf("AccountRotate of the key = %s; want key 2 and the token unchanged", fmtAccount(got))
	}
	// A rotation of both, with a shorter overlap for key 2: each previous
	// key keeps its own window.
	f.rotate(store.AccountRotateParams{Name: "acme", KeyID: 5, SealedKey: []byte("sealed key 5"), TokenHash: hash("t2"), PreviousUntil: at(30 * time.Minute), Now: at(2 * time.Minute)})
	keys, err = f.s.AccountKeys(f.ctx, "acme")
	if err != nil {
		f.t.Fatal(err)
	}
	want := []store.AccountKey{
		{KeyID: 5, SealedKey: []byte("sealed key 5"), Current: true},
		{KeyID: 2, SealedKey: []byte("sealed key 2"), RetiredAt: at(2 * time.Minute), UsableUntil: at(30 * time.Minute)},
		{KeyID: 1, SealedKey: acme.SealedKey, RetiredAt: at(time.Minute), UsableUntil: at(time.Hour)},
	}
	if len(keys) != len(want) {
		f.t.Fatalf("AccountKeys = %+v, want %+v", keys, want)
	}
	for i := range want {
		g, w := keys[i], want[i]
		if g.KeyID != w.KeyID || !bytes.Equal(g.SealedKey, w.SealedKey) || g.Current != w.Current ||
			!g.RetiredAt.Equal(w.RetiredAt) || !g.UsableUntil.Equal(w.UsableUntil) {
			f.t.Errorf("AccountKeys[%d] = %+v, want %+v", i, g, w)
		}
	}
	if !keys[0].Usable(at(1000*time.Hour)) || !keys[1].Usable(at(29*time.Minute)) || keys[1].Usable(at(30*time.Minute)) || !keys[2].Usable(at(59*time.Minute)) || keys[2].Usable(at(time.Hour)) {
		f.t.Errorf("Usable does not follow the overlap windows: %+v", keys)
	}
	if a, err := f.byToken(hash("t2"), at(time.Hour)); err != nil || a.KeyID != 5 {
		f.t.Errorf("AccountGetByToken(t2) = %s, %v; want key 5", fmtAccount(a), err)
	}
}

func testKeyRotationRefusesOldIDs(f *fixture) {
	f.account("acme") // key 1
	f.rotate(store.AccountRotateParams{Name: "acme", KeyID: 3, SealedKey: []byte("k3"), Now: at(0)})
	for _, id := range []uint32{1, 2, 3} {
		_, err := f.s.AccountRotate(f.ctx, store.AccountRotateParams{Name: "acme", KeyID: id, SealedKey: []byte("again"), TokenHash: hash(fmt.Sprint("t", id)), Now: at(time.Minute)})
		f.wantErr(fmt.Sprintf("AccountRotate to key id %d", id), err, store.ErrExists)
	}
	// Nothing of the refused rotations stuck, not even their tokens.
	a, err := f.s.AccountGet(f.ctx, "acme")
	if err != nil || a.KeyID != 3 || !bytes.Equal(a.SealedKey, []byte("k3")) || !bytes.Equal(a.TokenHash, hash("token of acme")) {
		f.t.Errorf("after refused rotations AccountGet = %s, %v; want key 3 and the first token", fmtAccount(a), err)
	}
}

func testConcurrentKeyRotations(f *fixture) {
	f.account("acme")
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			// Everyone reads key 1 as the newest and tries key 2.
			_, errs[i] = f.s.AccountRotate(f.ctx, store.AccountRotateParams{Name: "acme", KeyID: 2, SealedKey: []byte(fmt.Sprint("k2 by ", i)), Now: at(0)})
		})
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		default:
			f.wantErr(fmt.Sprintf("rotation %d", i), err, store.ErrExists)
		}
	}
	keys, err := f.s.AccountKeys(f.ctx, "acme")
	if err != nil {
		f.t.Fatal(err)
	}
	if won != 1 || len(keys) != 2 || keys[0].KeyID != 2 || keys[1].KeyID != 1 {
		f.t.Errorf("%d of %d concurrent rotations to key 2 succeeded, keys %+v; want exactly one, keys [2 1]", won, n, keys)
	}
}

func testAPIKeyScopesAndRevocation(f *fixture) {
	f.account("acme")
	f.account("globex")
	all, err := f.s.APIKeyCreate(f.ctx, store.APIKeyCreateParams{ID: "admin", Hash: hash("admin"), Name: "admin", Now: at(0)})
	if err != nil {
		f.t.Fatal(err)
	}
	scoped, err := f.s.APIKeyCreate(f.ctx, store.APIKeyCreateParams{ID: "ak-ci", Hash: hash("ci"), Name: "ci", Accounts: []string{"acme", "globex"}, Now: at(time.Second)})
	if err != nil {
		f.t.Fatal(err)
	}
	if len(all.Accounts) != 0 || !slices.Equal(scoped.Accounts, []string{"acme", "globex"}) || !scoped.RevokedAt.IsZero() {
		f.t.Errorf("APIKeyCreate: accounts %q and %q, revoked %v; want every account, [acme globex], not revoked", all.Accounts, scoped.Accounts, scoped.RevokedAt)
	}
	got, err := f.s.APIKeyGetByHash(f.ctx, hash("ci"))
	if err != nil || !slices.Equal(got.Accounts, []string{"acme", "globex"}) {
		f.t.Errorf("APIKeyGetByHash(ci) = %+v, %v; want accounts [acme globex]", got, err)
	}

	revoked, err := f.s.APIKeyRevoke(f.ctx, store.APIKeyRevokeParams{ID: "ak-ci", Now: at(time.Minute)})
	if err != nil || !revoked.RevokedAt.Equal(at(time.Minute)) {
		f.t.Fatalf("APIKeyRevoke = %+v, %v; want revoked at 1m", revoked, err)
	}
	// A revoked key is still found, marked, so callers can say why it is refused.
	got, err = f.s.APIKeyGetByHash(f.ctx, hash("ci"))
	if err != nil || !got.RevokedAt.Equal(at(time.Minute)) {
		f.t.Errorf("APIKeyGetByHash of a revoked key = %+v, %v; want it with RevokedAt 1m", got, err)
	}
	again, err := f.s.APIKeyRevoke(f.ctx, store.APIKeyRevokeParams{ID: "ak-ci", Now: at(time.Hour)})
	if err != nil || !again.RevokedAt.Equal(at(time.Minute)) {
		f.t.Errorf("second APIKeyRevoke = %+v, %v; want the first RevokedAt kept", again, err)
	}
	list, err := f.s.APIKeyList(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != "admin" || list[1].ID != "ak-ci" || !list[0].RevokedAt.IsZero() || list[1].RevokedAt.IsZero() {
		f.t.Errorf("APIKeyList = %+v; want admin (valid) then ak-ci (revoked)", list)
	}
}

func testAPIKeyRevokeUnknown(f *fixture) {
	_, err := f.s.APIKeyRevoke(f.ctx, store.APIKeyRevokeParams{ID: "nobody", Now: at(0)})
	f.wantErr("APIKeyRevoke of an unknown id", err, store.ErrNotFound)
}

func testAuditAppendThenList(f *fixture) {
	events := []store.AuditEvent{
		{At: at(0), Kind: store.AuditAuthFailed, Source: "192.0.2.1", Outcome: "/x/Poll", Detail: "invalid account token"},
		{At: at(time.Second), Kind: store.AuditWorkEnded, Actor: "account:acme", Account: "acme", WorkID: "w-1", InstanceID: "host-a", Outcome: "succeeded"},
		{At: at(2 * time.Second), Kind: store.AuditKeyRotated, Actor: "cli:root", Source: "host", Account: "acme", SealedScript: []byte{0, 1, 2, 0xff}, Detail: "key 2"},
	}
	var seqs []int64
	for _, e := range events {
		got, err := f.s.AuditAppend(f.ctx, e)
		if err != nil {
			f.t.Fatalf("AuditAppend(%s): %v", e.Kind, err)
		}
		seqs = append(seqs, got.Seq)
	}
	if !slices.IsSorted(seqs) || seqs[0] == seqs[1] || seqs[1] == seqs[2] {
		f.t.Fatalf("AuditAppend gave Seqs %v, want increasing", seqs)
	}
	got, err := f.s.AuditList(f.ctx, store.AuditListParams{Limit: 10})
	if err != nil {
		f.t.Fatal(err)
	}
	if len(got) != 3 {
		f.t.Fatalf("AuditList returned %d events, want 3", len(got))
	}
	for i, e := range events {
		e.Seq = seqs[i]
		g := got[i]
		if g.Seq != e.Seq || !g.At.Equal(e.At) || g.Kind != e.Kind || g.Actor != e.Actor || g.Source != e.Source ||
			g.Account != e.Account || g.WorkID != e.WorkID || g.InstanceID != e.InstanceID || g.Outcome != e.Outcome ||
			!bytes.Equal(g.SealedScript, e.SealedScript) || g.Detail != e.Detail {
			f.t.Errorf("AuditList[%d] = %+v, want %+v", i, g, e)
		}
	}
	if got[0].SealedScript != nil {
		f.t.Errorf("an event without a script came back with SealedScript %x, want nil", got[0].SealedScript)
	}
	since, err := f.s.AuditList(f.ctx, store.AuditListParams{Since: at(time.Second), Limit: 10})
	if err != nil || len(since) != 2 || since[0].Seq != seqs[1] {
		f.t.Errorf("AuditList(Since 1s) = %d events, %v; want the last 2", len(since), err)
	}
	page, err := f.s.AuditList(f.ctx, store.AuditListParams{AfterSeq: seqs[0], Limit: 1})
	if err != nil || len(page) != 1 || page[0].Seq != seqs[1] {
		f.t.Errorf("AuditList(AfterSeq first, Limit 1) = %+v, %v; want the second event", page, err)
	}
	if _, err := f.s.AuditList(f.ctx, store.AuditListParams{}); err == nil {
		f.t.Errorf("AuditList with Limit 0 succeeded, want an error")
	}
}

func testWorkEnqueueAppendsAudit(f *fixture) {
	f.account("acme")
	ev := func(id string) *store.AuditEvent {
		return &store.AuditEvent{At: at(0), Kind: store.AuditWorkQueued, Actor: "apikey:admin", Account: "acme", WorkID: id, SealedScript: []byte("sealed name")}
	}
	p := keyed("w-1", "acme", "k", at(0))
	p.Audit = ev("w-1")
	if _, err := f.s.WorkEnqueue(f.ctx, p); err != nil {
		f.t.Fatal(err)
	}
	// Refused enqueues write no event: a duplicate key, a taken id, an
	// unknown account.
	dup := keyed("w-2", "acme", "k", at(time.Second))
	dup.Audit = ev("w-2")
	_, err := f.s.WorkEnqueue(f.ctx, dup)
	f.wantErr("WorkEnqueue with a used key", err, store.ErrDuplicate)
	taken := keyed("w-1", "acme", "", at(time.Second))
	taken.Audit = ev("w-1 again")
	_, err = f.s.WorkEnqueue(f.ctx, taken)
	f.wantErr("WorkEnqueue with a taken id", err, store.ErrExists)
	unknown := keyed("w-3", "nobody", "", at(time.Second))
	unknown.Audit = ev("w-3")
	_, err = f.s.WorkEnqueue(f.ctx, unknown)
	f.wantErr("WorkEnqueue on an unknown account", err, store.ErrNotFound)
	// Without a key, as most enqueues are.
	plain := keyed("w-4", "acme", "", at(time.Second))
	plain.Audit = ev("w-4")
	if _, err := f.s.WorkEnqueue(f.ctx, plain); err != nil {
		f.t.Fatal(err)
	}

	got, err := f.s.AuditList(f.ctx, store.AuditListParams{Limit: 10})
	if err != nil {
		f.t.Fatal(err)
	}
	var ids []string
	for _, e := range got {
		ids = append(ids, e.WorkID)
		if e.Kind != store.AuditWorkQueued || !bytes.Equal(e.SealedScript, []byte("sealed name")) {
			f.t.Errorf("audit event %+v: want kind work.queued with its sealed script", e)
		}
	}
	if !slices.Equal(ids, []string{"w-1", "w-4"}) {
		f.t.Errorf("audit events for units %q, want [w-1 w-4] (the units queued)", ids)
	}
}

func testWorkQueuedCount(f *fixture) {
	f.account("acme")
	f.account("globex")
	for i := range 5 {
		f.enqueue(fmt.Sprint("a-", i), "acme", at(time.Duration(i)), at(time.Hour))
	}
	f.enqueue("g-1", "globex", at(0), at(time.Hour))
	f.claim("acme", "i-1", 1, at(time.Second)) // claimed units do not count
	for _, c := range []struct {
		account string
		atMost  int
		want    int
	}{{"acme", 0, 4}, {"acme", 100, 4}, {"acme", 2, 2}, {"globex", 0, 1}, {"nobody", 0, 0}} {
		got, err := f.s.WorkQueuedCount(f.ctx, c.account, c.atMost)
		if err != nil || got != c.want {
			f.t.Errorf("WorkQueuedCount(%q, %d) = %d, %v; want %d", c.account, c.atMost, got, err, c.want)
		}
	}
}

func testUnitEndsAppendAudit(f *fixture) {
	f.account("acme")
	tmpl := func(actor string) *store.AuditEvent {
		return &store.AuditEvent{At: at(time.Minute), Kind: store.AuditWorkEnded, Actor: actor, Source: "src", Detail: "d"}
	}
	f.enqueue("done", "acme", at(0), at(time.Hour))
	f.enqueue("cancelled", "acme", at(time.Microsecond), at(time.Hour))
	f.enqueue("expired", "acme", at(2*time.Microsecond), at(time.Second))
	c := f.claimOne("acme", "host-a", "done", at(time.Millisecond))

	if _, err := f.s.WorkComplete(f.ctx, store.WorkCompleteParams{ID: "done", ClaimID: c.ClaimID, State: store.StateSucceeded,
		SealedResult: []byte("r"), Now: at(2 * time.Millisecond), Audit: tmpl("account:acme")}); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.s.WorkCancel(f.ctx, store.WorkCancelParams{ID: "cancelled", Reason: "r", Now: at(3 * time.Millisecond), Audit: tmpl("apikey:admin")}); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.s.WorkExpire(f.ctx, store.WorkExpireParams{Now: at(time.Second), Audit: tmpl("automator")}); err != nil {
		f.t.Fatal(err)
	}
	// Refused changes append nothing.
	_, err := f.s.WorkComplete(f.ctx, store.WorkCompleteParams{ID: "done", ClaimID: c.ClaimID, State: store.StateSucceeded,
		SealedResult: []byte("r"), Now: at(4 * time.Millisecond), Audit: tmpl("again")})
	f.wantErr("WorkComplete of an ended unit", err, store.ErrNotClaimable)
	_, err = f.s.WorkCancel(f.ctx, store.WorkCancelParams{ID: "done", Now: at(5 * time.Millisecond), Audit: tmpl("again")})
	f.wantErr("WorkCancel of an ended unit", err, store.ErrNotClaimable)
	if ws, err := f.s.WorkExpire(f.ctx, store.WorkExpireParams{Now: at(time.Hour), Audit: tmpl("again")}); err != nil || len(ws) != 0 {
		f.t.Fatalf("second WorkExpire = %v, %v; want nothing expired", ids(ws), err)
	}

	got, err := f.s.AuditList(f.ctx, store.AuditListParams{Limit: 10})
	if err != nil {
		f.t.Fatal(err)
	}
	want := []store.AuditEvent{
		{Actor: "account:acme", WorkID: "done", InstanceID: "host-a", Outcome: "succeeded"},
		{Actor: "apikey:admin", WorkID: "cancelled", Outcome: "cancelled"},
		{Actor: "automator", WorkID: "expired", Outcome: "timed_out"},
	}
	if len(got) != len(want) {
		f.t.Fatalf("audit log holds %d events, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Kind != store.AuditWorkEnded || g.Actor != w.Actor || g.Account != "acme" || g.WorkID != w.WorkID ||
			g.InstanceID != w.InstanceID || g.Outcome != w.Outcome || g.Source != "src" || g.Detail != "d" || !g.At.Equal(at(time.Minute)) {
			f.t.Errorf("audit event %d = %+v, want %+v for account acme", i, g, w)
		}
	}
}

// adminEvent is an event of an administrative change, as the CLI makes
// them.
func adminEvent(kind, account, detail string) *store.AuditEvent {
	return &store.AuditEvent{At: at(time.Minute), Kind: kind, Actor: "cli:op", Source: "host", Account: account, Detail: detail}
}

// deletionEvents is an AccountDeleteParams.AuditDeletion: the deletion's
// event, and one per API key it revoked, from what it did.
func deletionEvents(d store.AccountDeletion) []store.AuditEvent {
	out := []store.AuditEvent{*adminEvent(store.AuditAccountDeleted, d.Name,
		fmt.Sprintf("%d cancelled, %d under %s, revoked %v, narrowed %v", len(d.Cancelled), d.Units, d.Tombstone, d.RevokedAPIKeys, d.NarrowedAPIKeys))}
	for _, id := range d.RevokedAPIKeys {
		out = append(out, *adminEvent(store.AuditAPIKeyRevoked, d.Name, id))
	}
	return out
}

func testAdminChangesAppendAudit(f *fixture) {
	create := func(name string) error {
		_, err := f.s.AccountCreate(f.ctx, store.AccountCreateParams{Name: name, TokenHash: hash("token of " + name), KeyID: 1,
			SealedKey: []byte("k"), Now: base, Audit: adminEvent(store.AuditAccountCreated, name, "key 1")})
		return err
	}
	if err := create("acme"); err != nil {
		f.t.Fatal(err)
	}
	f.wantErr("AccountCreate of a taken name", create("acme"), store.ErrExists)

	rotate := func(name string, keyID uint32, token string) error {
		_, err := f.s.AccountRotate(f.ctx, store.AccountRotateParams{Name: name, TokenHash: hash(token), KeyID: keyID, SealedKey: []byte("k2"),
			PreviousUntil: at(time.Hour), Now: at(time.Second), Audit: adminEvent(store.AuditKeyRotated, name, fmt.Sprintf("key %d", keyID))})
		return err
	}
	if err := rotate("acme", 2, "second token"); err != nil {
		f.t.Fatal(err)
	}
	f.wantErr("AccountRotate to a key id used already", rotate("acme", 2, "third token"), store.ErrExists)
	f.wantErr("AccountRotate of an unknown account", rotate("nobody", 2, "fourth token"), store.ErrNotFound)

	apiKey := func(id string, accounts ...string) error {
		_, err := f.s.APIKeyCreate(f.ctx, store.APIKeyCreateParams{ID: id, Hash: hash(id), Name: "n", Accounts: accounts, Now: at(2 * time.Second),
			Audit: adminEvent(store.AuditAPIKeyCreated, "", id)})
		return err
	}
	if err := apiKey("k-acme", "acme"); err != nil {
		f.t.Fatal(err)
	}
	f.wantErr("APIKeyCreate of a taken id", apiKey("k-acme"), store.ErrExists)
	f.wantErr("APIKeyCreate scoped to an unknown account", apiKey("k-nobody", "nobody"), store.ErrNotFound)
	if err := apiKey("k-all"); err != nil {
		f.t.Fatal(err)
	}

	revoke := func(id string, now time.Time) (store.APIKey, error) {
		return f.s.APIKeyRevoke(f.ctx, store.APIKeyRevokeParams{ID: id, Now: now, Audit: adminEvent(store.AuditAPIKeyRevoked, "", id)})
	}
	first, err := revoke("k-all", at(3*time.Second))
	if err != nil {
		f.t.Fatal(err)
	}
	// Revoked already: returned unchanged, and not audited again.
	again, err := revoke("k-all", at(4*time.Second))
	if err != nil || !again.RevokedAt.Equal(first.RevokedAt) {
		f.t.Errorf("APIKeyRevoke of a revoked key = revoked at %v, %v; want its first revocation, %v", again.RevokedAt, err, first.RevokedAt)
	}
	_, err = revoke("nobody", at(4*time.Second))
	f.wantErr("APIKeyRevoke of an unknown key", err, store.ErrNotFound)

	f.enqueue("w-1", "acme", at(5*time.Second), at(time.Hour))
	f.complete(f.claimOne("acme", "host-a", "w-1", at(6*time.Second)), at(7*time.Second))
	f.enqueue("w-2", "acme", at(8*time.Second), at(time.Hour))
	deleted := at(10 * time.Second)
	// Finished in its own call: AuditFinished, for a deletion left
	// unfinished, appends nothing.
	d, err := f.s.AccountDelete(f.ctx, store.AccountDeleteParams{Name: "acme", Reason: "deleted", Now: deleted, AuditDeletion: deletionEvents,
		AuditFinished: func(d store.AccountDeletion) []store.AuditEvent {
			return []store.AuditEvent{*adminEvent(store.AuditAccountDeletionFinished, d.Name, "finished")}
		}})
	if err != nil {
		f.t.Fatal(err)
	}
	_, err = f.s.AccountDelete(f.ctx, store.AccountDeleteParams{Name: "acme", Reason: "deleted", Now: at(11 * time.Second), AuditDeletion: deletionEvents})
	f.wantErr("AccountDelete of a deleted account", err, store.ErrNotFound)

	got, err := f.s.AuditList(f.ctx, store.AuditListParams{Limit: 100})
	if err != nil {
		f.t.Fatal(err)
	}
	tombstone := store.DeletedAccountName("acme", deleted)
	want := []store.AuditEvent{
		*adminEvent(store.AuditAccountCreated, "acme", "key 1"),
		*adminEvent(store.AuditKeyRotated, "acme", "key 2"),
		*adminEvent(store.AuditAPIKeyCreated, "", "k-acme"),
		*adminEvent(store.AuditAPIKeyCreated, "", "k-all"),
		*adminEvent(store.AuditAPIKeyRevoked, "", "k-all"),
		*adminEvent(store.AuditAccountDeleted, "acme", "1 cancelled, 2 under "+tombstone+", revoked [k-acme], narrowed []"),
		*adminEvent(store.AuditAPIKeyRevoked, "acme", "k-acme"),
	}
	if d.Tombstone != tombstone || len(d.Cancelled) != 1 || d.Units != 2 || !slices.Equal(d.RevokedAPIKeys, []string{"k-acme"}) {
		f.t.Errorf("AccountDelete = %+v, want 1 of 2 units cancelled under %q and k-acme revoked", d, tombstone)
	}
	if len(got) != len(want) {
		f.t.Fatalf("audit log holds %d events, want %d (the changes made, none refused): %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Kind != w.Kind || g.Account != w.Account || g.Detail != w.Detail || g.Actor != w.Actor || g.Source != w.Source || !g.At.Equal(w.At) {
			f.t.Errorf("audit event %d = %+v, want %+v", i, g, w)
		}
	}
}

// testAdminChangeWithFailingAudit: an event the store refuses to append
// (it has no kind) fails the change it records, which is not made.
func testAdminChangeWithFailingAudit(f *fixture) {
	bad := &store.AuditEvent{At: at(time.Minute), Actor: "cli:op", Detail: "no kind"}
	_, err := f.s.AccountCreate(f.ctx, store.AccountCreateParams{Name: "acme", TokenHash: hash("t"), KeyID: 1, SealedKey: []byte("k"), Now: base, Audit: bad})
	if err == nil {
		f.t.Errorf("AccountCreate with an event that fails succeeded")
	}
	if _, err := f.s.AccountGet(f.ctx, "acme"); !errors.Is(err, store.ErrNotFound) {
		f.t.Errorf("AccountGet of the account whose event failed: %v, want ErrNotFound", err)
	}

	acme := f.account("acme")
	_, err = f.s.AccountRotate(f.ctx, store.AccountRotateParams{Name: "acme", TokenHash: hash("new token"), KeyID: 2, SealedKey: []byte("k2"),
		PreviousUntil: at(time.Hour), Now: at(time.Second), Audit: bad})
	if err == nil {
		f.t.Errorf("AccountRotate with an event that fails succeeded")
	}
	if a, err := f.s.AccountGet(f.ctx, "acme"); err != nil || a.KeyID != 1 || !bytes.Equal(a.TokenHash, acme.TokenHash) {
		f.t.Errorf("account after a rotation whose event failed = key %d, %v; want its first token and key 1", a.KeyID, err)
	}

	_, err = f.s.APIKeyCreate(f.ctx, store.APIKeyCreateParams{ID: "k-1", Hash: hash("k-1"), Name: "n", Now: at(2 * time.Second), Audit: bad})
	if err == nil {
		f.t.Errorf("APIKeyCreate with an event that fails succeeded")
	}
	if _, err := f.s.APIKeyGetByHash(f.ctx, hash("k-1")); !errors.Is(err, store.ErrNotFound) {
		f.t.Errorf("APIKeyGetByHash of the key whose event failed: %v, want ErrNotFound", err)
	}

	if _, err := f.s.APIKeyCreate(f.ctx, store.APIKeyCreateParams{ID: "k-2", Hash: hash("k-2"), Name: "n", Accounts: []string{"acme"}, Now: at(2 * time.Second)}); err != nil {
		f.t.Fatal(err)
	}
	_, err = f.s.APIKeyRevoke(f.ctx, store.APIKeyRevokeParams{ID: "k-2", Now: at(3 * time.Second), Audit: bad})
	if err == nil {
		f.t.Errorf("APIKeyRevoke with an event that fails succeeded")
	}
	if k, err := f.s.APIKeyGetByHash(f.ctx, hash("k-2")); err != nil || !k.RevokedAt.IsZero() {
		f.t.Errorf("API key after a revocation whose event failed = revoked at %v, %v; want valid", k.RevokedAt, err)
	}

	f.enqueue("w-1", "acme", at(4*time.Second), at(time.Hour))
	_, err = f.s.AccountDelete(f.ctx, store.AccountDeleteParams{Name: "acme", Reason: "deleted", Now: at(5 * time.Second),
		AuditDeletion: func(store.AccountDeletion) []store.AuditEvent { return []store.AuditEvent{*bad} }})
	if err == nil {
		f.t.Errorf("AccountDelete with an event that fails succeeded")
	}
	if _, err := f.s.AccountGet(f.ctx, "acme"); err != nil {
		f.t.Errorf("AccountGet of the account whose deletion's event failed: %v, want the account", err)
	}
	f.wantState("w-1", store.StateQueued)
	if k, err := f.s.APIKeyGetByHash(f.ctx, hash("k-2")); err != nil || !k.RevokedAt.IsZero() || !slices.Equal(k.Accounts, []string{"acme"}) {
		f.t.Errorf("API key after a deletion whose event failed = %+v, %v; want valid, for acme", k, err)
	}
	if n := f.auditLen(); n != 0 {
		f.t.Errorf("the audit log holds %d events, want none", n)
	}
}
