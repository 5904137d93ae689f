package storetest

import (
	"slices"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// Cases of account deletion (store.AccountDelete, deleted.go).
var deleteCases = []testCase{
	{"AccountDeleteCancelsOpenUnitsAndKeepsAllUnderItsTombstone", testAccountDeleteCancelsOpenUnits},
	{"DeletedAccountsTokensKeysAndInstancesAreGone", testDeletedAccountsCredentialsAreGone},
	{"AccountCreatedAgainAfterDeleteSharesNothingWithTheOld", testAccountCreatedAgainSharesNothing},
	{"APollOfADeletedAccountIsNeverRecordedUnderTheAccountCreatedAgain", testDeletedAccountsPollsStayOut},
	{"AccountDeleteRevokesTheAPIKeysOfOnlyThatAccount", testAccountDeleteUnscopesAPIKeys},
	{"AccountDeletionsListsDeletionsUntilTheirTombstoneIsPurged", testAccountDeletionsList},
	{"AccountDeleteOfUnknownAccountIsErrNotFound", testAccountDeleteUnknown},
	{"AccountDeleteWithResumeLeavesAnAccountNotBeingDeletedAlone", testAccountDeleteResumeOnly},
}

func (f *fixture) deleteAccount(name string, now time.Time) store.AccountDeletion {
	f.t.Helper()
	d, err := f.s.AccountDelete(f.ctx, store.AccountDeleteParams{Name: name, Reason: "account deleted", Now: now})
	if err != nil {
		f.t.Fatalf("AccountDelete(%q): %v", name, err)
	}
	return d
}

func testAccountDeleteCancelsOpenUnits(f *fixture) {
	f.account("acme")
	f.account("globex")
	deadline := at(time.Hour)
	done := f.complete(f.claimOne("acme", "host-a", f.enqueue("w-done", "acme", at(0), deadline).ID, at(time.Second)), at(2*time.Second))
	claimed := f.claimOne("acme", "host-a", f.enqueue("w-claimed", "acme", at(3*time.Second), deadline).ID, at(4*time.Second))
	queued := f.enqueue("w-queued", "acme", at(5*time.Second), deadline)
	other := f.enqueue("w-other", "globex", at(6*time.Second), deadline)

	now := at(time.Minute)
	tomb := store.DeletedAccountName("acme", now)
	d, err := f.s.AccountDelete(f.ctx, store.AccountDeleteParams{Name: "acme", Reason: "account deleted", Now: now,
		Audit: &store.AuditEvent{At: now, Kind: store.AuditWorkEnded, Actor: "cli:op", Detail: "account deleted"}})
	if err != nil {
		f.t.Fatalf("AccountDelete: %v", err)
	}
	if d.Name != "acme" || d.Tombstone != tomb || !d.DeletedAt.Equal(now) || d.Units != 3 {
		f.t.Errorf("AccountDelete = name %q, tombstone %q, deleted at %v, %d units; want acme, %q, %v, 3", d.Name, d.Tombstone, d.DeletedAt, d.Units, tomb, now)
	}
	if name, ok := store.DeletedAccount(d.Tombstone); !ok || name != "acme" {
		f.t.Errorf("DeletedAccount(%q) = %q, %v; want acme, true", d.Tombstone, name, ok)
	}
	if got := ids(d.Cancelled); !slices.Equal(got, []string{"w-claimed", "w-queued"}) {
		f.t.Fatalf("AccountDelete cancelled %v; want [w-claimed w-queued]", got)
	}
	for i, before := range []store.Work{claimed, queued} {
		want := before
		want.Account, want.State, want.Reason, want.FinishedAt = tomb, store.StateCancelled, "account deleted", now
		f.wantWork("AccountDelete's cancelled unit", d.Cancelled[i], want)
		f.wantWork("WorkGet of a cancelled unit", f.get(before.ID), want)
	}
	wantDone := done
	wantDone.Account = tomb
	f.wantWork("WorkGet of a unit that had ended", f.get(done.ID), wantDone)
	f.wantWork("WorkGet of another account's unit", f.get(other.ID), other)

	// Terminal: a result posted later is refused, as for any ended unit.
	_, err = f.s.WorkComplete(f.ctx, store.WorkCompleteParams{ID: claimed.ID, ClaimID: claimed.ClaimID, State: store.StateSucceeded, Now: at(2 * time.Minute)})
	f.wantErr("WorkComplete of a unit cancelled by its account's deletion", err, store.ErrNotClaimable)
	_, err = f.s.WorkCancel(f.ctx, store.WorkCancelParams{ID: queued.ID, Reason: "again", Now: at(2 * time.Minute)})
	f.wantErr("WorkCancel of a unit cancelled by its account's deletion", err, store.ErrNotClaimable)
	if next, ok, err := f.s.WorkNextDeadline(f.ctx); err != nil || !ok || !next.Equal(deadline) {
		f.t.Errorf("WorkNextDeadline = %v, %v, %v; want globex's unit's %v only", next, ok, err, deadline)
	}
	expired, err := f.s.WorkExpire(f.ctx, store.WorkExpireParams{Now: at(2 * time.Hour)})
	if err != nil || !slices.Equal(ids(expired), []string{"w-other"}) {
		f.t.Errorf("WorkExpire past every deadline = %v, %v; want [w-other]", ids(expired), err)
	}

	// Listed under the tombstone, not the name.
	list, err := f.s.WorkList(f.ctx, store.WorkListParams{Account: tomb, Limit: 10})
	if err != nil || !slices.Equal(ids(list), []string{"w-queued", "w-claimed", "w-done"}) {
		f.t.Errorf("WorkList(tombstone) = %v, %v; want [w-queued w-claimed w-done]", ids(list), err)
	}
	list, err = f.s.WorkList(f.ctx, store.WorkListParams{Account: "acme", Limit: 10})
	if err != nil || len(list) != 0 {
		f.t.Errorf("WorkList(acme) after its deletion = %v, %v; want none", ids(list), err)
	}

	// Each cancelled unit has its work.ended record, with the unit.
	events, err := f.s.AuditList(f.ctx, store.AuditListParams{Limit: 100})
	if err != nil {
		f.t.Fatal(err)
	}
	var ended []string
	for _, e := range events {
		if e.Kind == store.AuditWorkEnded {
			if e.Account != tomb || e.Outcome != string(store.StateCancelled) || e.Detail != "account deleted" {
				f.t.Errorf("audit event %+v; want account %q, outcome cancelled, detail \"account deleted\"", e, tomb)
			}
			ended = append(ended, e.WorkID)
		}
	}
	slices.Sort(ended)
	if !slices.Equal(ended, []string{"w-claimed", "w-queued"}) {
		f.t.Errorf("work.ended audit events for %v; want [w-claimed w-queued]", ended)
	}
}

func testDeletedAccountsCredentialsAreGone(f *fixture) {
	acme := f.account("acme")
	f.account("globex")
	// A previous token and a previous key, both still in their overlap.
	f.rotate(store.AccountRotateParams{Name: "acme", TokenHash: hash("acme token 2"), KeyID: 2, SealedKey: []byte("sealed key 2"),
		PreviousUntil: at(24 * time.Hour), Now: at(time.Minute)})
	if err := f.s.InstanceSeen(f.ctx, store.InstanceSeenParams{Account: "acme", InstanceID: "host-a", Hostname: "a", Version: "1", Now: at(time.Minute)}); err != nil {
		f.t.Fatal(err)
	}
	f.deleteAccount("acme", at(time.Hour))
	now := at(2 * time.Hour)

	for _, h := range [][]byte{acme.TokenHash, hash("acme token 2")} {
		_, err := f.byToken(h, now)
		f.wantErr("AccountGetByToken of a deleted account's token", err, store.ErrNotFound)
		_, err = f.s.AccountGetByTokenHash(f.ctx, h)
		f.wantErr("AccountGetByTokenHash of a deleted account's token", err, store.ErrNotFound)
	}
	_, err := f.s.AccountGet(f.ctx, "acme")
	f.wantErr("AccountGet of a deleted account", err, store.ErrNotFound)
	_, err = f.s.AccountKeys(f.ctx, "acme")
	f.wantErr("AccountKeys of a deleted account", err, store.ErrNotFound)
	_, err = f.s.AccountRotate(f.ctx, store.AccountRotateParams{Name: "acme", TokenHash: hash("acme token 3"), PreviousUntil: now, Now: now})
	f.wantErr("AccountRotate of a deleted account", err, store.ErrNotFound)
	_, err = f.s.AccountDelete(f.ctx, store.AccountDeleteParams{Name: "acme", Now: now})
	f.wantErr("AccountDelete of a deleted account", err, store.ErrNotFound)
	_, err = f.s.WorkEnqueue(f.ctx, store.WorkEnqueueParams{ID: "w-late", Account: "acme", KeyID: 2, SealedCommand: []byte("c"), Now: now, Deadline: now.Add(time.Hour)})
	f.wantErr("WorkEnqueue on a deleted account", err, store.ErrNotFound)
	if ws := f.claim("acme", "host-a", 5, now); len(ws) != 0 {
		f.t.Errorf("WorkClaim on a deleted account claimed %v", ids(ws))
	}

	// The tombstone is no account either, by any name.
	tomb := store.DeletedAccountName("acme", at(time.Hour))
	_, err = f.s.AccountGet(f.ctx, tomb)
	f.wantErr("AccountGet of a tombstone", err, store.ErrNotFound)
	_, err = f.s.AccountKeys(f.ctx, tomb)
	f.wantErr("AccountKeys of a tombstone", err, store.ErrNotFound)
	accounts, err := f.s.AccountList(f.ctx)
	if err != nil || len(accounts) != 1 || accounts[0].Name != "globex" {
		f.t.Errorf("AccountList = %d accounts, %v; want globex only", len(accounts), err)
	}
	stats, err := f.s.AccountStats(f.ctx, store.AccountStatsParams{OnlineSince: at(0)})
	if err != nil || len(stats) != 1 || stats[0].Account != "globex" {
		f.t.Errorf("AccountStats = %+v, %v; want globex only", stats, err)
	}

	// Its instances are gone, and a poll that was on its way when it was
	// deleted is not recorded (nor does it fail the batch it is in).
	if in, err := f.s.InstanceList(f.ctx, "acme"); err != nil || len(in) != 0 {
		f.t.Errorf("InstanceList(acme) after its deletion = %+v, %v; want none", in, err)
	}
	if err := f.s.InstanceSeen(f.ctx, store.InstanceSeenParams{Account: "acme", InstanceID: "host-a", Hostname: "a", Version: "1", Now: now}); err != nil {
		f.t.Errorf("InstanceSeen of a deleted account: %v; want it left out", err)
	}
	f.seen(store.InstanceSeenParams{Account: "globex", InstanceID: "host-g", Hostname: "g", Version: "1", Now: now.Add(-time.Second)})
	unrecorded, err := f.s.InstancesSeen(f.ctx, []store.InstanceSeenParams{
		{Account: "acme", InstanceID: "host-a", Hostname: "a", Version: "1", Now: now},
		{Account: "globex", InstanceID: "host-g", Hostname: "g", Version: "1", Now: now},
	})
	if err != nil || len(unrecorded) != 0 {
		f.t.Errorf("InstancesSeen with a poll of a deleted account: %v, polls of instances not recorded %+v; want it left out, not returned", err, unrecorded)
	}
	if in, err := f.s.InstanceList(f.ctx, "acme"); err != nil || len(in) != 0 {
		f.t.Errorf("InstanceList(acme) after late polls = %+v, %v; want none", in, err)
	}
	if in, err := f.s.InstanceList(f.ctx, "globex"); err != nil || len(in) != 1 {
		f.t.Errorf("InstanceList(globex) = %+v, %v; want host-g", in, err)
	}
}

func testAccountCreatedAgainSharesNothing(f *fixture) {
	old := f.account("acme")
	_, err := f.s.WorkEnqueue(f.ctx, store.WorkEnqueueParams{ID: "w-old", Account: "acme", KeyID: 1, SealedCommand: []byte("c"),
		Now: at(0), Deadline: at(time.Hour), IdempotencyKey: "nightly", IdempotencySince: at(-time.Hour)})
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.s.InstanceSeen(f.ctx, store.InstanceSeenParams{Account: "acme", InstanceID: "host-a", Hostname: "a", Version: "1", Now: at(time.Second)}); err != nil {
		f.t.Fatal(err)
	}
	f.deleteAccount("acme", at(time.Minute))

	fresh, err := f.s.AccountCreate(f.ctx, store.AccountCreateParams{Name: "acme", TokenHash: hash("new acme token"), KeyID: 1, SealedKey: []byte("new sealed key"), Now: at(2 * time.Minute)})
	if err != nil {
		f.t.Fatalf("AccountCreate of a deleted account's name: %v", err)
	}
	got, err := f.s.AccountGet(f.ctx, "acme")
	if err != nil || string(got.SealedKey) != "new sealed key" || !got.CreatedAt.Equal(at(2*time.Minute)) {
		f.t.Errorf("AccountGet of the new acme = %s, %v; want the new one", fmtAccount(got), err)
	}
	_, err = f.byToken(old.TokenHash, at(3*time.Minute))
	f.wantErr("AccountGetByToken of the old account's token", err, store.ErrNotFound)
	if a, err := f.byToken(fresh.TokenHash, at(3*time.Minute)); err != nil || a.Name != "acme" {
		f.t.Errorf("AccountGetByToken of the new token = %q, %v; want acme", a.Name, err)
	}
	keys, err := f.s.AccountKeys(f.ctx, "acme")
	if err != nil || len(keys) != 1 || string(keys[0].SealedKey) != "new sealed key" {
		f.t.Errorf("AccountKeys of the new acme = %+v, %v; want its one new key", keys, err)
	}
	if list, err := f.s.WorkList(f.ctx, store.WorkListParams{Account: "acme", Limit: 10}); err != nil || len(list) != 0 {
		f.t.Errorf("WorkList of the new acme = %v, %v; want none", ids(list), err)
	}
	if in, err := f.s.InstanceList(f.ctx, "acme"); err != nil || len(in) != 0 {
		f.t.Errorf("InstanceList of the new acme = %+v, %v; want none", in, err)
	}
	if n, err := f.s.WorkQueuedCount(f.ctx, "acme", 0); err != nil || n != 0 {
		f.t.Errorf("WorkQueuedCount of the new acme = %d, %v; want 0", n, err)
	}
	_, err = f.s.WorkByIdempotencyKey(f.ctx, "acme", "nightly", at(-time.Hour))
	f.wantErr("WorkByIdempotencyKey of the old account's key on the new", err, store.ErrNotFound)
	w, err := f.s.WorkEnqueue(f.ctx, store.WorkEnqueueParams{ID: "w-new", Account: "acme", KeyID: 1, SealedCommand: []byte("c2"),
		Now: at(3 * time.Minute), Deadline: at(time.Hour), IdempotencyKey: "nightly", IdempotencySince: at(-time.Hour)})
	if err != nil || w.ID != "w-new" {
		f.t.Errorf("WorkEnqueue on the new acme with the old account's idempotency key = %q, %v; want a new unit", w.ID, err)
	}
	stats, err := f.s.AccountStats(f.ctx, store.AccountStatsParams{OnlineSince: at(0)})
	if err != nil || len(stats) != 1 || stats[0].Account != "acme" || stats[0].Queued != 1 || stats[0].Instances != 0 {
		f.t.Errorf("AccountStats = %+v, %v; want the new acme with its 1 queued unit and no instance", stats, err)
	}
	// Deleted again, it gets a second tombstone; the first keeps its units.
	d := f.deleteAccount("acme", at(4*time.Minute))
	if d.Units != 1 || len(d.Cancelled) != 1 || d.Cancelled[0].ID != "w-new" {
		f.t.Errorf("second AccountDelete: %d units, cancelled %v; want w-new only", d.Units, ids(d.Cancelled))
	}
	if a := f.get("w-old").Account; a != store.DeletedAccountName("acme", at(time.Minute)) {
		f.t.Errorf("w-old's account after the second deletion = %q; want the first tombstone", a)
	}
}

func testAccountDeleteUnscopesAPIKeys(f *fixture) {
	f.account("acme")
	f.account("globex")
	for i, k := range []struct {
		id       string
		accounts []string
	}{
		{"k-acme", []string{"acme"}},
		{"k-both", []string{"acme", "globex"}},
		{"k-globex", []string{"globex"}},
		{"k-all", nil},
		{"k-acme-revoked", []string{"acme"}},
	} {
		if _, err := f.s.APIKeyCreate(f.ctx, store.APIKeyCreateParams{ID: k.id, Hash: hash(k.id), Name: k.id, Accounts: k.accounts, Now: at(time.Duration(i) * time.Second)}); err != nil {
			f.t.Fatal(err)
		}
	}
	if _, err := f.s.APIKeyRevoke(f.ctx, store.APIKeyRevokeParams{ID: "k-acme-revoked", Now: at(time.Minute)}); err != nil {
		f.t.Fatal(err)
	}
	now := at(time.Hour)
	d := f.deleteAccount("acme", now)
	if !slices.Equal(d.RevokedAPIKeys, []string{"k-acme"}) || !slices.Equal(d.NarrowedAPIKeys, []string{"k-both"}) {
		f.t.Errorf("AccountDelete revoked %v and narrowed %v; want [k-acme] and [k-both]", d.RevokedAPIKeys, d.NarrowedAPIKeys)
	}
	want := map[string]struct {
		accounts []string
		revoked  time.Time
	}{
		"k-acme":         {[]string{"acme"}, now},
		"k-both":         {[]string{"globex"}, time.Time{}},
		"k-globex":       {[]string{"globex"}, time.Time{}},
		"k-all":          {nil, time.Time{}},
		"k-acme-revoked": {[]string{"acme"}, at(time.Minute)},
	}
	list, err := f.s.APIKeyList(f.ctx)
	if err != nil || len(list) != len(want) {
		f.t.Fatalf("APIKeyList = %d keys, %v; want %d", len(list), err, len(want))
	}
	for _, k := range list {
		w := want[k.ID]
		if !slices.Equal(k.Accounts, w.accounts) || !k.RevokedAt.Equal(w.revoked) {
			f.t.Errorf("API key %s after the deletion: accounts %q, revoked at %v; want %q, %v", k.ID, k.Accounts, k.RevokedAt, w.accounts, w.revoked)
		}
	}
}

func testAccountDeletionsList(f *fixture) {
	f.account("acme")
	f.account("globex")
	f.enqueue("w-1", "globex", at(0), at(time.Hour))
	a := f.deleteAccount("acme", at(time.Minute))
	g := f.deleteAccount("globex", at(2*time.Minute))
	got, err := f.s.AccountDeletions(f.ctx, at(time.Minute))
	if err != nil || len(got) != 2 {
		f.t.Fatalf("AccountDeletions(1m) = %+v, %v; want acme's and globex's", got, err)
	}
	for i, want := range []store.AccountDeletion{a, g} {
		if got[i].Name != want.Name || got[i].Tombstone != want.Tombstone || !got[i].DeletedAt.Equal(want.DeletedAt) {
			f.t.Errorf("AccountDeletions[%d] = %+v; want %s, %s, %v", i, got[i], want.Name, want.Tombstone, want.DeletedAt)
		}
	}
	if got, err := f.s.AccountDeletions(f.ctx, at(time.Minute+time.Microsecond)); err != nil || len(got) != 1 || got[0].Name != "globex" {
		f.t.Errorf("AccountDeletions(after acme's) = %+v, %v; want globex's only", got, err)
	}
	// The purge removes a tombstone deleted before its cutoff once it holds
	// no unit; globex's holds one until that is purged.
	if _, err := f.s.WorkPurge(f.ctx, store.WorkPurgeParams{QueuedBefore: at(0), Max: 10}); err != nil {
		f.t.Fatal(err)
	}
	if got, err := f.s.AccountDeletions(f.ctx, at(0)); err != nil || len(got) != 2 {
		f.t.Errorf("AccountDeletions after a purge before both = %+v, %v; want both kept", got, err)
	}
	if _, err := f.s.WorkPurge(f.ctx, store.WorkPurgeParams{QueuedBefore: at(time.Hour), Max: 10}); err != nil {
		f.t.Fatal(err)
	}
	if got, err := f.s.AccountDeletions(f.ctx, at(0)); err != nil || len(got) != 0 {
		f.t.Errorf("AccountDeletions after the purge of every unit = %+v, %v; want none", got, err)
	}
}

func testAccountDeleteUnknown(f *fixture) {
	f.account("acme")
	_, err := f.s.AccountDelete(f.ctx, store.AccountDeleteParams{Name: "nobody", Now: at(0)})
	f.wantErr("AccountDelete(nobody)", err, store.ErrNotFound)
	if _, err := f.s.AccountGet(f.ctx, "acme"); err != nil {
		f.t.Errorf("AccountGet(acme) after deleting another: %v", err)
	}
}

// testAccountDeleteResumeOnly: AccountDelete with Resume deletes no account
// (ErrNotFound), and an account deleted in full is not listed as being
// deleted.
func testAccountDeleteResumeOnly(f *fixture) {
	f.account("acme")
	f.account("globex")
	f.enqueue("w-1", "globex", at(0), at(time.Hour))
	f.deleteAccount("globex", at(time.Minute))
	for _, name := range []string{"acme", "globex", "nobody"} {
		_, err := f.s.AccountDelete(f.ctx, store.AccountDeleteParams{Name: name, Resume: true, Now: at(2 * time.Minute)})
		f.wantErr("AccountDelete with Resume of "+name, err, store.ErrNotFound)
	}
	if _, err := f.s.AccountGet(f.ctx, "acme"); err != nil {
		f.t.Errorf("AccountGet(acme) after AccountDelete with Resume of it: %v, want it kept", err)
	}
	if ds, err := f.s.AccountsBeingDeleted(f.ctx); err != nil || len(ds) != 0 {
		f.t.Errorf("AccountsBeingDeleted = %+v, %v; want none", ds, err)
	}
}

// testDeletedAccountsPollsStayOut: a poll authenticated as an account
// (InstanceSeenParams.AccountCreatedAt), written after that account was
// deleted and another created under its name, one at a time or in a batch
// (an automator's polls kept in memory), is not recorded: the new account
// lists only its own instances. A rotation of the new account changes
// nothing of which account it is.
func testDeletedAccountsPollsStayOut(f *fixture) {
	f.account("acme")
	old, err := f.byToken(hash("token of acme"), at(time.Second))
	if err != nil {
		f.t.Fatal(err)
	}
	oldPoll := store.InstanceSeenParams{Account: "acme", InstanceID: "host-old", Hostname: "old", Version: "1",
		AccountCreatedAt: old.CreatedAt, Now: at(time.Second)}
	f.seen(oldPoll)
	f.deleteAccount("acme", at(time.Minute))
	if _, err := f.s.AccountCreate(f.ctx, store.AccountCreateParams{Name: "acme", TokenHash: hash("new acme token"), KeyID: 1,
		SealedKey: []byte("new sealed key"), Now: at(2 * time.Minute)}); err != nil {
		f.t.Fatal(err)
	}
	fresh, err := f.byToken(hash("new acme token"), at(2*time.Minute))
	if err != nil {
		f.t.Fatal(err)
	}

	late := oldPoll
	late.Now = at(3 * time.Minute)
	f.seen(late)
	late.InstanceID, late.Hostname = "host-old-2", "old-2"
	newPoll := store.InstanceSeenParams{Account: "acme", InstanceID: "host-new", Hostname: "new", Version: "1",
		AccountCreatedAt: fresh.CreatedAt, Now: at(150 * time.Second)}
	f.seen(newPoll) // a batch writes only instances recorded
	newPoll.Now = at(3 * time.Minute)
	// late's instance has no record, but its account is not the one
	// polled: it is left out, not returned for InstanceSeen.
	f.seenBatch(late, newPoll)
	f.wantInstances("acme", []store.Instance{listedAs(newPoll)})

	f.rotate(store.AccountRotateParams{Name: "acme", TokenHash: hash("newer acme token"), KeyID: 2, SealedKey: []byte("newer sealed key"),
		PreviousUntil: at(4 * time.Minute), Now: at(4 * time.Minute)})
	rotated, err := f.byToken(hash("newer acme token"), at(4*time.Minute))
	if err != nil || !rotated.CreatedAt.Equal(fresh.CreatedAt) {
		f.t.Fatalf("the rotated account created at %v, %v; want %v", rotated.CreatedAt, err, fresh.CreatedAt)
	}
	newPoll.Now = at(5 * time.Minute)
	f.seen(newPoll)
	newPoll.Now = at(6 * time.Minute)
	f.seenBatch(newPoll)
	f.wantInstances("acme", []store.Instance{listedAs(newPoll)})

	// A poll that names no account creation is recorded under any
	// account of its name (the writers that predate the field).
	unnamed := store.InstanceSeenParams{Account: "acme", InstanceID: "host-any", Hostname: "any", Version: "1", Now: at(6 * time.Minute)}
	f.seen(unnamed)
	f.wantInstances("acme", []store.Instance{listedAs(unnamed), listedAs(newPoll)})
}
