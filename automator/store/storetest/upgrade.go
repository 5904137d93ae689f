package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// An upgrade is a restart with a newer binary, which migrates the schema.
// Guarantee 3 (Durable) holds across it: each backend's upgrade test makes
// a database at every earlier schema version, fills it with UpgradeData
// using that version's own columns, opens it as the store (all migrations)
// and hands it to CheckUpgraded.

// UpgradeHas says which parts of UpgradeData a schema version can hold;
// every version holds the account, its units, its instances and an
// unscoped API key.
type UpgradeHas struct {
	Replicas          bool // replica heartbeats
	Rotation          bool // a previous token and a previous key of the account
	APIKeyScopes      bool // API keys scoped to accounts, and revoked ones
	Audit             bool // the audit log
	DashboardSessions bool // dashboard sessions signed out of
}

// UpgradeData is what an automator in service has written: an account whose
// key is sealed with the master key, units in every state with commands and
// results sealed with the account's keys as the server and the proxy seal
// them, instances, API keys, audit events. The fill of each schema version
// writes the parts its columns can hold (Work, APIKeys and Audit say which
// for a version); CheckUpgraded then reads them all back through the store.
type UpgradeData struct {
	// Now is the store's clock during the checks. Units due at or before
	// it are past their deadline; the others are not.
	Now    time.Time
	Master crypto.MasterKey
	// Account is the row of the account: its current token's hash and its
	// current key (id 2) sealed with Master.
	Account store.Account
	Token   string
	Key     crypto.Key
	// PrevToken and PrevKey (id 1) were replaced by a rotation whose
	// overlap window ends at PrevUntil (after Now): both still work.
	PrevToken     string
	PrevTokenHash []byte
	PrevKey       crypto.Key
	// PrevSealedKey is PrevKey sealed with Master; PrevRetiredAt when the
	// rotation retired it.
	PrevSealedKey []byte
	PrevRetiredAt time.Time
	PrevUntil     time.Time

	work     []store.Work
	commands map[string]*automatorv1.Command // by work id
	results  map[string]*automatorv1.Result  // by work id, the units that have one
	apiKeys  []upgradeAPIKey
	audit    []store.AuditEvent
	scripts  map[string]string // the script name sealed into each audit event, by work id
	// Instances are the instances' records; their InFlight is what the
	// automator before the upgrade stored in the in_flight column (what the
	// proxy said it ran at its last poll), not what InstanceList counts.
	Instances []store.Instance
	Replicas  []store.Replica
	// Sessions are dashboard sessions signed out of, by id, with when they
	// would have expired (after Now).
	Sessions []store.DashboardSessionEndParams
}

type upgradeAPIKey struct {
	store.APIKey
	secret string
}

// Work ids of the units of UpgradeData, one per state the checks need.
const (
	upQueued      = "w_up_queued"        // queued, deadline ahead
	upQueuedOld   = "w_up_queued_oldkey" // queued, sealed with the previous key (Rotation)
	upQueuedLate  = "w_up_queued_late"   // queued, deadline passed
	upClaimed     = "w_up_claimed"       // claimed by i-1, deadline ahead
	upClaimedLate = "w_up_claimed_late"  // claimed by i-2, deadline passed
	upSucceeded   = "w_up_succeeded"
	upFailed      = "w_up_failed"
	upTimedOut    = "w_up_timed_out"
	upCancelled   = "w_up_cancelled"
)

// NewUpgradeData makes the data set with fresh keys and secrets.
func NewUpgradeData(t *testing.T) *UpgradeData {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("making the upgrade data: %v", err)
		}
	}
	now := base
	d := &UpgradeData{
		Now:           now,
		PrevRetiredAt: now.Add(-30 * time.Minute),
		PrevUntil:     now.Add(24 * time.Hour),
		commands:      map[string]*automatorv1.Command{},
		results:       map[string]*automatorv1.Result{},
		scripts:       map[string]string{},
	}
	var err error
	d.Master, err = crypto.NewMasterKey()
	must(err)
	d.Key, err = crypto.NewKey(2)
	must(err)
	d.PrevKey, err = crypto.NewKey(1)
	must(err)
	d.Token, err = crypto.NewToken("opt_")
	must(err)
	d.PrevToken, err = crypto.NewToken("opt_")
	must(err)
	d.PrevTokenHash = crypto.HashToken(d.PrevToken)
	sealedKey, err := d.Master.SealKey("acme", d.Key)
	must(err)
	d.PrevSealedKey, err = d.Master.SealKey("acme", d.PrevKey)
	must(err)
	d.Account = store.Account{Name: "acme", TokenHash: crypto.HashToken(d.Token), KeyID: d.Key.ID, SealedKey: sealedKey, CreatedAt: now.Add(-time.Hour)}

	unit := func(id string, state store.State, key crypto.Key, queued, deadline time.Duration) *store.Work {
		cmd := &automatorv1.Command{Script: "deploy.sh", Args: []string{"--unit", id}, Stdin: []byte("stdin of " + id), Env: map[string]string{"STAGE": "prod"}}
		plain, err := proto.Marshal(cmd)
		must(err)
		sealed, err := crypto.Seal(key, "acme", id, crypto.DirCommand, plain)
		must(err)
		d.commands[id] = cmd
		d.work = append(d.work, store.Work{ID: id, Account: "acme", State: state, KeyID: key.ID, SealedCommand: sealed,
			QueuedAt: now.Add(queued), Deadline: now.Add(deadline)})
		return &d.work[len(d.work)-1]
	}
	claim := func(w *store.Work, instance, claimID string, at time.Duration) {
		w.InstanceID, w.ClaimID, w.ClaimedAt = instance, claimID, now.Add(at)
	}
	end := func(w *store.Work, at time.Duration, reason string, exit int32) {
		w.FinishedAt, w.Reason = now.Add(at), reason
		if exit < 0 {
			return // no result
		}
		r := &automatorv1.Result{ExitCode: exit, Stdout: []byte("out of " + w.ID), Stderr: []byte("err of " + w.ID), InstanceId: w.InstanceID}
		if w.State == store.StateFailed {
			r.Failure = reason
		}
		plain, err := proto.Marshal(r)
		must(err)
		w.SealedResult, err = crypto.Seal(d.Key, "acme", w.ID, crypto.DirResult, plain)
		must(err)
		d.results[w.ID] = r
	}

	w := unit(upQueued, store.StateQueued, d.Key, -4*time.Minute, time.Hour)
	w.IdempotencyKey = "deploy-42"
	unit(upQueuedOld, store.StateQueued, d.PrevKey, -3*time.Minute, time.Hour)
	unit(upQueuedLate, store.StateQueued, d.Key, -10*time.Minute, -time.Second)
	claim(unit(upClaimed, store.StateClaimed, d.Key, -9*time.Minute, time.Hour), "i-1", "c-1", -8*time.Minute)
	claim(unit(upClaimedLate, store.StateClaimed, d.Key, -8*time.Minute, -2*time.Second), "i-2", "c-2", -7*time.Minute)
	w = unit(upSucceeded, store.StateSucceeded, d.Key, -7*time.Minute, time.Hour)
	claim(w, "i-1", "c-3", -6*time.Minute)
	end(w, -5*time.Minute, "", 3)
	w = unit(upFailed, store.StateFailed, d.Key, -6*time.Minute, time.Hour)
	claim(w, "i-2", "c-4", -5*time.Minute)
	end(w, -5*time.Minute, "script not found: deploy.sh", 0)
	w = unit(upTimedOut, store.StateTimedOut, d.Key, -20*time.Minute, -15*time.Minute)
	claim(w, "i-1", "c-5", -19*time.Minute)
	end(w, -15*time.Minute, "deadline passed; claimed by instance i-1", -1)
	w = unit(upCancelled, store.StateCancelled, d.Key, -5*time.Minute, time.Hour)
	end(w, -4*time.Minute, "cancelled by the caller", -1)

	d.Instances = []store.Instance{
		{Account: "acme", InstanceID: "i-1", Hostname: "host-1", Version: "v0.9.0", LastPollAt: now.Add(-time.Second), InFlight: 3},
		{Account: "acme", InstanceID: "i-2", Hostname: "host-2", Version: "v0.8.1", LastPollAt: now.Add(-time.Minute), InFlight: 0},
	}
	d.Replicas = []store.Replica{
		{ReplicaID: "r-1", Hostname: "automator-1", Version: "v0.9.0", StartedAt: now.Add(-2 * time.Hour), LastSeen: now.Add(-3 * time.Second)},
	}
	for i, k := range []struct {
		name     string
		accounts []string
		revoked  time.Duration
	}{{"admin", nil, 0}, {"acme deployer", []string{"acme"}, 0}, {"retired", nil, -time.Minute}} {
		secret, err := crypto.NewToken("oak_")
		must(err)
		key := upgradeAPIKey{APIKey: store.APIKey{ID: fmt.Sprintf("ak_%d", i+1), Hash: crypto.HashToken(secret), Name: k.name,
			CreatedAt: now.Add(time.Duration(i-50) * time.Minute), Accounts: k.accounts}, secret: secret}
		if k.revoked != 0 {
			key.RevokedAt = now.Add(k.revoked)
		}
		d.apiKeys = append(d.apiKeys, key)
	}
	for i, e := range []store.AuditEvent{
		{Kind: store.AuditAccountCreated, Actor: "cli:root", Source: "automator-1", Account: "acme", Detail: "AccountCreate"},
		{Kind: store.AuditWorkQueued, Actor: "apikey:ak_1", Source: "10.0.0.7", Account: "acme", WorkID: upSucceeded, Detail: "ExecuteOnProxy"},
		{Kind: store.AuditWorkEnded, Actor: "account:acme", Source: "10.0.0.8", Account: "acme", WorkID: upSucceeded, InstanceID: "i-1", Outcome: string(store.StateSucceeded), Detail: "Complete"},
		{Kind: store.AuditAuthFailed, Source: "10.0.0.9", Detail: "invalid API key"},
	} {
		e.At = now.Add(time.Duration(i-40) * time.Minute)
		if e.Kind == store.AuditWorkQueued {
			d.scripts[e.WorkID] = d.commands[e.WorkID].GetScript()
			e.SealedScript, err = d.Master.SealAuditField(e.WorkID, []byte(d.scripts[e.WorkID]))
			must(err)
		}
		d.audit = append(d.audit, e)
	}
	d.Sessions = []store.DashboardSessionEndParams{{ID: "sess-signed-out", Expires: now.Add(12 * time.Hour)}}
	return d
}

// Work returns the units a database of a schema with has holds, oldest
// first: every state, and a unit sealed with the previous key only where
// the schema keeps previous keys.
func (d *UpgradeData) Work(has UpgradeHas) []store.Work {
	var out []store.Work
	for _, w := range d.work {
		if w.ID == upQueuedOld && !has.Rotation {
			continue
		}
		out = append(out, w)
	}
	slices.SortFunc(out, func(a, b store.Work) int { return a.QueuedAt.Compare(b.QueuedAt) })
	return out
}

// APIKeys returns the API keys a database of a schema with has holds:
// scoped and revoked ones only where the schema has scopes.
func (d *UpgradeData) APIKeys(has UpgradeHas) []store.APIKey {
	var out []store.APIKey
	for _, k := range d.apiKeys {
		if !has.APIKeyScopes && (len(k.Accounts) > 0 || !k.RevokedAt.IsZero()) {
			continue
		}
		out = append(out, k.APIKey)
	}
	return out
}

// Audit returns the audit events in the order they were appended (their
// Seq unset: the database numbers them).
func (d *UpgradeData) Audit() []store.AuditEvent { return slices.Clone(d.audit) }

// CheckUpgraded checks, through the store alone, that s (opened on a
// database filled with d.Work(has), d.APIKeys(has) and the rest of d that
// has allows, then migrated) kept every guarantee: the queued units are
// claimable exactly once and their commands open, the claimed ones are not
// claimable and take their results, the units past their deadline time out
// through the expiry, the ended ones read back unchanged with their
// results, the account's token authenticates and its keys open, the API
// keys, instances, replicas, audit events and dashboard sign-outs are all
// there.
func CheckUpgraded(t *testing.T, s store.Store, d *UpgradeData, has UpgradeHas) {
	ctx := t.Context()
	now := d.Now
	works := d.Work(has)
	byID := map[string]store.Work{}
	for _, w := range works {
		byID[w.ID] = w
	}

	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping after the upgrade: %v; want the store ready (its schema at the latest version)", err)
	}

	// The account: its current token authenticates, its key opens with the
	// master key, and so do the previous ones within their window.
	a, err := s.AccountGet(ctx, "acme")
	if err != nil {
		t.Fatalf("AccountGet(acme) after the upgrade: %v", err)
	}
	if a.Name != d.Account.Name || !bytes.Equal(a.TokenHash, d.Account.TokenHash) || a.KeyID != d.Account.KeyID ||
		!bytes.Equal(a.SealedKey, d.Account.SealedKey) || !a.CreatedAt.Equal(d.Account.CreatedAt) {
		t.Errorf("AccountGet(acme) after the upgrade = %s, want %s", fmtAccount(a), fmtAccount(d.Account))
	}
	byToken, err := s.AccountGetByToken(ctx, store.AccountGetByTokenParams{TokenHash: crypto.HashToken(d.Token), Now: now})
	if err != nil || byToken.Name != "acme" || !byToken.PreviousTokenUntil.IsZero() {
		t.Errorf("AccountGetByToken(the token) after the upgrade = %s, %v; want acme by its current token", fmtAccount(byToken), err)
	}
	ring := crypto.Keys{}
	if k, err := d.Master.OpenKey("acme", a.SealedKey); err != nil || k != d.Key {
		t.Errorf("the account key after the upgrade does not open to the key sealed before it: %v", err)
	} else {
		ring = append(ring, k)
	}
	if has.Rotation {
		prev, err := s.AccountGetByToken(ctx, store.AccountGetByTokenParams{TokenHash: crypto.HashToken(d.PrevToken), Now: now})
		if err != nil || prev.Name != "acme" || !prev.PreviousTokenUntil.Equal(d.PrevUntil) {
			t.Errorf("AccountGetByToken(the previous token) after the upgrade = %s, %v; want acme until %v", fmtAccount(prev), err, d.PrevUntil)
		}
		keys, err := s.AccountKeys(ctx, "acme")
		if err != nil || len(keys) != 2 || !keys[0].Current || keys[0].KeyID != d.Key.ID || keys[1].Current || keys[1].KeyID != d.PrevKey.ID ||
			!bytes.Equal(keys[1].SealedKey, d.PrevSealedKey) || !keys[1].RetiredAt.Equal(d.PrevRetiredAt) || !keys[1].UsableUntil.Equal(d.PrevUntil) {
			t.Errorf("AccountKeys(acme) after the upgrade = %+v, %v; want the current key %d and the previous %d until %v", keys, err, d.Key.ID, d.PrevKey.ID, d.PrevUntil)
		} else if k, err := d.Master.OpenKey("acme", keys[1].SealedKey); err != nil || k != d.PrevKey {
			t.Errorf("the previous account key after the upgrade does not open to the key sealed before it: %v", err)
		} else {
			ring = append(ring, k)
		}
	}

	// API keys authenticate with their secrets, scopes and revocations as
	// they were.
	for _, k := range d.apiKeys {
		want := k.APIKey
		if !slices.ContainsFunc(d.APIKeys(has), func(x store.APIKey) bool { return x.ID == want.ID }) {
			continue
		}
		got, err := s.APIKeyGetByHash(ctx, crypto.HashToken(k.secret))
		if err != nil || got.ID != want.ID || got.Name != want.Name || !got.CreatedAt.Equal(want.CreatedAt) ||
			!slices.Equal(got.Accounts, want.Accounts) || !got.RevokedAt.Equal(want.RevokedAt) {
			t.Errorf("APIKeyGetByHash(secret of %s) after the upgrade = %+v, %v; want %+v", want.ID, got, err, want)
		}
	}

	// Every unit reads back as it was written, before anything moves.
	for _, want := range works {
		got, err := s.WorkGet(ctx, want.ID)
		if err != nil {
			t.Errorf("WorkGet(%s) after the upgrade: %v", want.ID, err)
			continue
		}
		if diff := workDiff(got, want); diff != "" {
			t.Errorf("WorkGet(%s) after the upgrade differs from what was written: %s", want.ID, diff)
		}
	}
	if got, err := s.WorkByIdempotencyKey(ctx, "acme", "deploy-42", now.Add(-time.Hour)); err != nil || got.ID != upQueued {
		t.Errorf("WorkByIdempotencyKey(acme, deploy-42) after the upgrade = %q, %v; want %s", got.ID, err, upQueued)
	}
	var listed []string
	for _, w := range works {
		listed = append(listed, w.ID)
	}
	slices.Reverse(listed)
	if got, err := s.WorkList(ctx, store.WorkListParams{Account: "acme", Limit: 100}); err != nil || !slices.Equal(workIDs(got), listed) {
		t.Errorf("WorkList(acme) after the upgrade = %v, %v; want %v", workIDs(got), err, listed)
	}
	queued := []string{upQueued, upQueuedLate}
	claimed := []string{upClaimed, upClaimedLate}
	if has.Rotation {
		queued = append(queued, upQueuedOld)
	}
	// By every state, of the account and of every account: the units
	// already there are in the indexes a later schema added (those of the
	// ended states too).
	for state, want := range map[store.State][]string{
		store.StateQueued: queued, store.StateClaimed: claimed,
		store.StateSucceeded: {upSucceeded}, store.StateFailed: {upFailed},
		store.StateTimedOut: {upTimedOut}, store.StateCancelled: {upCancelled},
	} {
		for _, account := range []string{"acme", ""} {
			got, err := s.WorkList(ctx, store.WorkListParams{Account: account, State: state, Limit: 100})
			ids := workIDs(got)
			slices.Sort(ids)
			slices.Sort(want)
			if err != nil || !slices.Equal(ids, want) {
				t.Errorf("WorkList(account %q, %s) after the upgrade = %v, %v; want %v", account, state, ids, err, want)
			}
		}
	}
	if stats, err := s.AccountStats(ctx, store.AccountStatsParams{OnlineSince: now.Add(-10 * time.Second)}); err != nil || len(stats) != 1 ||
		stats[0].Queued != len(queued) || stats[0].Claimed != len(claimed) || stats[0].Instances != 2 || stats[0].InstancesOnline != 1 {
		t.Errorf("AccountStats after the upgrade = %+v, %v; want %d queued, %d claimed, 2 instances of which 1 online", stats, err, len(queued), len(claimed))
	}
	// Each instance's in flight is the units it holds claimed (one each,
	// i-2's past its deadline but not yet expired), not the count stored.
	wantInstances := func(when string, inFlight ...int) {
		t.Helper()
		instances, err := s.InstanceList(ctx, "acme")
		if err != nil || len(instances) != len(d.Instances) {
			t.Errorf("InstanceList(acme) %s = %+v, %v; want %+v", when, instances, err, d.Instances)
			return
		}
		for i, want := range d.Instances {
			want.InFlight = inFlight[i]
			g := instances[i]
			if g.Account != want.Account || g.InstanceID != want.InstanceID || g.Hostname != want.Hostname || g.Version != want.Version ||
				!g.LastPollAt.Equal(want.LastPollAt) || g.InFlight != want.InFlight {
				t.Errorf("InstanceList(acme)[%d] %s = %+v, want %+v", i, when, g, want)
			}
		}
	}
	wantInstances("after the upgrade", 1, 1)
	if n, err := s.WorkQueuedCount(ctx, "acme", 0); err != nil || n != len(queued) {
		t.Errorf("WorkQueuedCount(acme) after the upgrade = %d, %v; want %d", n, err, len(queued))
	}

	// The queued units within their deadline are claimed, once, oldest
	// first, and their commands open with the account's keys, bound to
	// their work ids.
	claimIDs := []string{"c-new-1", "c-new-2", "c-new-3", "c-new-4", "c-new-5", "c-new-6", "c-new-7", "c-new-8", "c-new-9", "c-new-10"}
	got, err := s.WorkClaim(ctx, store.WorkClaimParams{Account: "acme", InstanceID: "i-3", Max: len(claimIDs), ClaimIDs: claimIDs, Now: now})
	wantClaimed := []string{upQueued}
	if has.Rotation {
		wantClaimed = append(wantClaimed, upQueuedOld)
	}
	if err != nil || !slices.Equal(workIDs(got), wantClaimed) {
		t.Fatalf("WorkClaim after the upgrade = %v, %v; want %v (the queued units within their deadline, oldest first)", workIDs(got), err, wantClaimed)
	}
	for i, w := range got {
		if w.State != store.StateClaimed || w.InstanceID != "i-3" || w.ClaimID != claimIDs[i] || !w.ClaimedAt.Equal(now) {
			t.Errorf("claimed unit %s after the upgrade = %s; want claimed by i-3 under %s at %v", w.ID, fmtWork(w), claimIDs[i], now)
		}
		plain, err := crypto.Open(ring, "acme", w.ID, crypto.DirCommand, w.SealedCommand)
		if err != nil {
			t.Errorf("the command of %s after the upgrade does not open: %v", w.ID, err)
			continue
		}
		var cmd automatorv1.Command
		if err := proto.Unmarshal(plain, &cmd); err != nil || !proto.Equal(&cmd, d.commands[w.ID]) {
			t.Errorf("the command of %s after the upgrade = %v, %v; want %v", w.ID, &cmd, err, d.commands[w.ID])
		}
	}
	if again, err := s.WorkClaim(ctx, store.WorkClaimParams{Account: "acme", InstanceID: "i-4", Max: len(claimIDs), ClaimIDs: claimIDs, Now: now}); err != nil || len(again) != 0 {
		t.Errorf("a second WorkClaim after the upgrade = %v, %v; want nothing (each unit is claimed once)", workIDs(again), err)
	}

	// Results are accepted from the claims made before the upgrade and
	// after it, only under the right claim id, and read back.
	complete := func(id, claimID string) {
		t.Helper()
		r := &automatorv1.Result{ExitCode: 0, Stdout: []byte("done " + id), InstanceId: "x"}
		plain, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		sealed, err := crypto.Seal(d.Key, "acme", id, crypto.DirResult, plain)
		if err != nil {
			t.Fatal(err)
		}
		p := store.WorkCompleteParams{ID: id, ClaimID: "c-wrong", Account: "acme", State: store.StateSucceeded, SealedResult: sealed, Now: now}
		if _, err := s.WorkComplete(ctx, p); !errors.Is(err, store.ErrClaimMismatch) {
			t.Errorf("WorkComplete(%s) under another claim id after the upgrade: %v, want ErrClaimMismatch", id, err)
		}
		p.ClaimID = claimID
		w, err := s.WorkComplete(ctx, p)
		if err != nil || w.State != store.StateSucceeded || !bytes.Equal(w.SealedResult, sealed) || !w.FinishedAt.Equal(now) {
			t.Errorf("WorkComplete(%s) after the upgrade = %s, %v; want succeeded with its result", id, fmtWork(w), err)
		}
		if _, err := s.WorkComplete(ctx, p); !errors.Is(err, store.ErrNotClaimable) {
			t.Errorf("WorkComplete(%s) a second time after the upgrade: %v, want ErrNotClaimable", id, err)
		}
		if w, err := s.WorkGet(ctx, id); err != nil || w.State != store.StateSucceeded || !bytes.Equal(w.SealedResult, sealed) {
			t.Errorf("WorkGet(%s) after its result = %s, %v; want succeeded with the result", id, fmtWork(w), err)
		} else if _, err := crypto.Open(ring, "acme", id, crypto.DirResult, w.SealedResult); err != nil {
			t.Errorf("the result of %s does not open: %v", id, err)
		}
	}
	if w, err := s.WorkGet(ctx, upClaimed); err != nil || w.State != store.StateClaimed || w.InstanceID != "i-1" {
		t.Errorf("WorkGet(%s) after the upgrade = %s, %v; want claimed by i-1", upClaimed, fmtWork(w), err)
	}
	complete(upClaimed, "c-1")
	for i, id := range wantClaimed {
		complete(id, claimIDs[i])
	}

	// The units past their deadline time out through the expiry, claimed
	// or not; nothing else does.
	expired, err := s.WorkExpire(ctx, store.WorkExpireParams{Now: now})
	ids := workIDs(expired)
	slices.Sort(ids)
	if want := []string{upClaimedLate, upQueuedLate}; err != nil || !slices.Equal(ids, want) {
		t.Errorf("WorkExpire after the upgrade = %v, %v; want %v", ids, err, want)
	}
	for _, id := range []string{upClaimedLate, upQueuedLate} {
		if w, err := s.WorkGet(ctx, id); err != nil || w.State != store.StateTimedOut || w.Reason == "" {
			t.Errorf("WorkGet(%s) after the expiry = %s, %v; want timed_out with a reason", id, fmtWork(w), err)
		}
	}
	if _, ok, err := s.WorkNextDeadline(ctx); err != nil || ok {
		t.Errorf("WorkNextDeadline with every unit ended = %v, %v; want none", ok, err)
	}

	// The units that had ended are as they were, results included, and stay
	// so.
	for _, id := range []string{upSucceeded, upFailed, upTimedOut, upCancelled} {
		want := byID[id]
		if _, err := s.WorkCancel(ctx, store.WorkCancelParams{ID: id, Reason: "late cancel", Now: now}); !errors.Is(err, store.ErrNotClaimable) {
			t.Errorf("WorkCancel(%s, ended before the upgrade): %v, want ErrNotClaimable", id, err)
		}
		got, err := s.WorkGet(ctx, id)
		if err != nil {
			t.Errorf("WorkGet(%s) after the upgrade: %v", id, err)
			continue
		}
		if diff := workDiff(got, want); diff != "" {
			t.Errorf("WorkGet(%s), ended before the upgrade, changed: %s", id, diff)
		}
		r, ok := d.results[id]
		if !ok {
			continue
		}
		plain, err := crypto.Open(ring, "acme", id, crypto.DirResult, got.SealedResult)
		var res automatorv1.Result
		if err == nil {
			err = proto.Unmarshal(plain, &res)
		}
		if err != nil || !proto.Equal(&res, r) {
			t.Errorf("the result of %s after the upgrade = %v, %v; want %v", id, &res, err, r)
		}
	}

	// Instances, replicas, audit events and dashboard sign-outs.
	wantInstances("once every unit ended", 0, 0)
	if has.Replicas {
		replicas, err := s.ReplicaList(ctx)
		if err != nil || len(replicas) != len(d.Replicas) {
			t.Errorf("ReplicaList after the upgrade = %+v, %v; want %+v", replicas, err, d.Replicas)
		} else {
			for i, want := range d.Replicas {
				g := replicas[i]
				if g.ReplicaID != want.ReplicaID || g.Hostname != want.Hostname || g.Version != want.Version ||
					!g.StartedAt.Equal(want.StartedAt) || !g.LastSeen.Equal(want.LastSeen) {
					t.Errorf("ReplicaList[%d] after the upgrade = %+v, want %+v", i, g, want)
				}
			}
		}
	}
	if has.Audit {
		events, err := s.AuditList(ctx, store.AuditListParams{Limit: 100})
		if err != nil || len(events) != len(d.audit) {
			t.Fatalf("AuditList after the upgrade = %+v, %v; want the %d events written before it", events, err, len(d.audit))
		}
		var last int64
		for i, want := range d.audit {
			g := events[i]
			if g.Seq <= last {
				t.Errorf("AuditList[%d] after the upgrade has seq %d, not after %d", i, g.Seq, last)
			}
			last = g.Seq
			script := g.SealedScript
			g.Seq, g.SealedScript, want.SealedScript = 0, nil, nil
			g.At, want.At = g.At.UTC(), want.At.UTC()
			if !reflect.DeepEqual(g, want) {
				t.Errorf("AuditList[%d] after the upgrade = %+v, want %+v", i, g, want)
			}
			if name, ok := d.scripts[want.WorkID]; ok && want.Kind == store.AuditWorkQueued {
				if plain, err := d.Master.OpenAuditField(want.WorkID, script); err != nil || string(plain) != name {
					t.Errorf("the sealed script of audit event %d after the upgrade opens to %q, %v; want %q", i, plain, err, name)
				}
			}
		}
		e, err := s.AuditAppend(ctx, store.AuditEvent{At: now, Kind: store.AuditAPIKeyCreated, Actor: "cli:root", Detail: "after the upgrade"})
		if err != nil || e.Seq <= last {
			t.Errorf("AuditAppend after the upgrade = seq %d, %v; want a seq after %d", e.Seq, err, last)
		}
	}
	if has.DashboardSessions {
		for _, sess := range d.Sessions {
			if ended, err := s.DashboardSessionEnded(ctx, sess.ID); err != nil || !ended {
				t.Errorf("DashboardSessionEnded(%s) after the upgrade = %v, %v; want the sign-out kept", sess.ID, ended, err)
			}
		}
	}
}

func workIDs(ws []store.Work) []string {
	var ids []string
	for _, w := range ws {
		ids = append(ids, w.ID)
	}
	return ids
}

// fmtWork shows a unit without its sealed blobs (their lengths only).
func fmtWork(w store.Work) string {
	return fmt.Sprintf("{%s %s key %d queued %v deadline %v claimed %v by %q under %q finished %v reason %q idempotency key %q command %d bytes result %d bytes}",
		w.ID, w.State, w.KeyID, w.QueuedAt, w.Deadline, w.ClaimedAt, w.InstanceID, w.ClaimID, w.FinishedAt, w.Reason, w.IdempotencyKey, len(w.SealedCommand), len(w.SealedResult))
}

// workDiff names the fields in which got differs from want, "" when none.
func workDiff(got, want store.Work) string {
	norm := func(w store.Work) store.Work {
		for _, t := range []*time.Time{&w.QueuedAt, &w.Deadline, &w.ClaimedAt, &w.FinishedAt} {
			*t = t.UTC()
		}
		if len(w.SealedResult) == 0 {
			w.SealedResult = nil
		}
		return w
	}
	g, w := reflect.ValueOf(norm(got)), reflect.ValueOf(norm(want))
	var diff []string
	for i := range g.NumField() {
		gf, wf := g.Field(i).Interface(), w.Field(i).Interface()
		if !reflect.DeepEqual(gf, wf) {
			if b, ok := gf.([]byte); ok {
				gf, wf = fmt.Sprintf("%d bytes %x", len(b), b), fmt.Sprintf("%d bytes %x", len(wf.([]byte)), wf)
			}
			diff = append(diff, fmt.Sprintf("%s = %v, want %v", g.Type().Field(i).Name, gf, wf))
		}
	}
	return strings.Join(diff, "; ")
}
