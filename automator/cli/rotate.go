package cli

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/clihelp"
)

// DefaultOverlap is how long a rotated token (and key) keeps working for
// proxies still on the old profile, unless --overlap says otherwise.
const DefaultOverlap = 24 * time.Hour

// maxOverlap bounds --overlap: a previous credential is meant to retire.
const maxOverlap = 30 * 24 * time.Hour

// cmdAccountRotate is `account rotate-token` and `account rotate-key`: it
// gives the account a new token (and, for rotate-key, a new key), keeps the
// old ones working for --overlap, and prints the new profile. Proxies move
// to it one by one with no downtime; after the overlap the old token is
// refused and the old key no longer handed out.
func cmdAccountRotate(ctx context.Context, rotateKey bool, args []string, env Env) error {
	what := "rotate-token"
	if rotateKey {
		what = "rotate-key"
	}
	fs := newFlags("account "+what, env)
	dir := fs.String("data-dir", "", "the automator's data directory")
	db := dbFlag(fs)
	overlap := clihelp.Duration(fs, "overlap", DefaultOverlap, "how long the old token and key keep working for proxies on the old profile (0: refused at once)")
	name, err := accountArgs(fs, args, dir, fmt.Sprintf("usage: automator account %s NAME --data-dir DIR [--db DSN] [--overlap DUR]", what))
	if err != nil {
		return err
	}
	if *overlap < 0 || *overlap > maxOverlap {
		return fmt.Errorf("--overlap %v is outside [0, %v]", *overlap, maxOverlap)
	}
	if err := secretOut(env.Stdout, env.Stderr, "the account's new profile, with its new token"); err != nil {
		return err
	}
	d, err := openAccountAdmin(ctx, *dir, *db)
	if err != nil {
		return err
	}
	defer d.st.Close()
	if err := d.profileReady(*dir); err != nil {
		return err
	}
	return rotateAccount(ctx, d, name, rotateKey, *overlap, *dir, env)
}

// rotateAccount makes the rotation of cmdAccountRotate on the store of d.
// Everything its printout needs is read, and every key opened, before the
// rotation is committed: from the commit on, the new token exists nowhere
// but in this process, so nothing that can fail may stand between the
// commit and the printing of the profile.
func rotateAccount(ctx context.Context, d accountAdmin, name string, rotateKey bool, overlap time.Duration, dir string, env Env) error {
	what := "rotate-token"
	if rotateKey {
		what = "rotate-key"
	}
	cfg, master, caPEM, st := d.cfg, d.master, d.caPEM, d.st
	keys, err := st.AccountKeys(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("account %q not found; see `automator account list --data-dir %s`%s", name, shellArg(dir), withSameDB(d.db))
	}
	if err != nil {
		return err
	}
	// Read before the commit, as everything the printout needs.
	seen, seenErr := st.InstanceList(ctx, name)
	token, err := crypto.NewToken("opt_")
	if err != nil {
		return err
	}
	now := time.Now()
	p := store.AccountRotateParams{Name: name, TokenHash: crypto.HashToken(token), PreviousUntil: now.Add(overlap), Now: now}
	kind, detail := store.AuditTokenRotated, fmt.Sprintf("previous token valid until %s", p.PreviousUntil.UTC().Format(time.RFC3339))
	var newKey crypto.Key
	if rotateKey {
		var highest uint32
		for _, k := range keys {
			highest = max(highest, k.KeyID)
		}
		if highest == math.MaxUint32 {
			return fmt.Errorf("account %q has used every key id", name)
		}
		if newKey, err = crypto.NewKey(highest + 1); err != nil {
			return err
		}
		if p.SealedKey, err = master.SealKey(name, newKey); err != nil {
			return err
		}
		p.KeyID = newKey.ID
		kind, detail = store.AuditKeyRotated, fmt.Sprintf("key %d current; previous token and key %d usable until %s", newKey.ID, newKey.ID-1, p.PreviousUntil.UTC().Format(time.RFC3339))
	}
	p.Audit = cliEvent(store.AuditEvent{At: now, Kind: kind, Account: name, Detail: detail})
	current, previous, err := rotatedKeys(master, name, keys, p, newKey)
	if err != nil {
		return err
	}
	profile := ProfileWithPrevious(name, cfg.PublicURL, token, current.String(), previous, string(caPEM))

	acct, err := st.AccountRotate(ctx, p)
	interrupted := errors.Is(err, store.ErrWithdrawalInterrupted)
	switch {
	case errors.Is(err, store.ErrExists):
		return fmt.Errorf("another rotation of account %q was made at the same time; run this again", name)
	case err != nil && !interrupted:
		return err
	}
	// The rotation is committed, with its audit event: the profile printed
	// below is the only copy of the new token, even when the command is
	// interrupted from here on.
	ctx = context.WithoutCancel(ctx)
	if interrupted {
		fmt.Fprintf(env.Stderr, "automator: warning: %v; the rotation stands\n", err)
	}
	if acct.KeyID != current.ID {
		// A rotate-key of another process committed between the read of
		// the keys and this rotation (a rotate-key of this one would have
		// been refused above): its key is the current one. Read the keys
		// again; should that fail, the profile computed before still holds
		// the new token, which is what must not be lost.
		if again, err := accountProfile(ctx, st, master, name, cfg.PublicURL, token, string(caPEM), now); err == nil {
			profile = again
		} else {
			fmt.Fprintf(env.Stderr, "automator: warning: account %q got a new key from another rotation while this one ran, and reading it failed (%v): the profile below has the new token but key %d; run `automator account rotate-token %s --data-dir %s`%s for one with the current key\n",
				name, err, current.ID, name, dir, withSameDB(d.db))
		}
	}
	_, printErr := fmt.Fprint(env.Stdout, profile)
	if printErr != nil {
		return fmt.Errorf("account %q is rotated, but its new profile could not be written (%w), and its new token is nowhere else; run `automator account %s %s --data-dir %s --overlap %v`%s again for another",
			name, printErr, what, name, dir, overlap, withSameDB(d.db))
	}
	noteLoopbackProfile(env.Stderr, cfg.PublicURL, dir)
	if overlap > 0 {
		old := "the old token keeps"
		if rotateKey {
			old = "the old token and key keep"
		}
		fmt.Fprintf(env.Stderr, "automator: account %q rotated; %s working until %s (--overlap %v): install this profile on every proxy of the account before then, stopped standbys included\n",
			name, old, p.PreviousUntil.UTC().Format(time.RFC3339), overlap)
	} else {
		fmt.Fprintf(env.Stderr, "automator: account %q rotated with no overlap: proxies on the old profile, or on any earlier one, are refused from now on; install this profile on every proxy of the account, stopped standbys included\n", name)
	}
	if seenErr != nil {
		fmt.Fprintf(env.Stderr, "automator: warning: the account's instances could not be listed (%v): see `automator instances --account %s --data-dir %s`%s\n", seenErr, name, shellArg(dir), withSameDB(d.db))
	} else {
		fmt.Fprintf(env.Stderr, "automator: instances that polled with account %q:\n", name)
		writeSeenInstances(env.Stderr, seen, d.cfg.PollWindow, time.Now())
	}
	return nil
}

// rotatedKeys returns the keys the profile of an account has once rotation
// p is committed, from keys, the account's keys read before it (as
// accountProfile would read them after it, at p.Now): the current key
// (newKey, for a rotate-key), and the previous keys still usable, newest
// first. For a rotate-key, the key it replaces stays usable until
// p.PreviousUntil, and with no overlap the keys of earlier rotations end
// too (store.AccountRotateParams).
func rotatedKeys(master crypto.MasterKey, name string, keys []store.AccountKey, p store.AccountRotateParams, newKey crypto.Key) (current crypto.Key, previous []string, err error) {
	rotatesKey, overlap := p.KeyID != 0, p.PreviousUntil.After(p.Now)
	if rotatesKey {
		current = newKey
	}
	for _, m := range keys {
		switch {
		case rotatesKey && !overlap:
			continue // every key but the new one ends now
		case !m.Usable(p.Now):
			continue
		}
		k, err := master.OpenKey(name, m.SealedKey)
		if err != nil {
			return crypto.Key{}, nil, fmt.Errorf("opening key %d of account %q: %w", m.KeyID, name, err)
		}
		if m.Current && !rotatesKey {
			current = k
			continue
		}
		previous = append(previous, k.String())
	}
	return current, previous, nil
}

// accountProfile renders the profile of an account with the given token:
// its current key, and the previous keys still usable at now.
func accountProfile(ctx context.Context, st store.Store, master crypto.MasterKey, name, url, token, caPEM string, now time.Time) (string, error) {
	keys, err := st.AccountKeys(ctx, name)
	if err != nil {
		return "", err
	}
	var current string
	var previous []string
	for _, m := range keys {
		if !m.Usable(now) {
			continue
		}
		k, err := master.OpenKey(name, m.SealedKey)
		if err != nil {
			return "", fmt.Errorf("opening key %d of account %q: %w", m.KeyID, name, err)
		}
		if m.Current {
			current = k.String()
		} else {
			previous = append(previous, k.String())
		}
	}
	return ProfileWithPrevious(name, url, token, current, previous, caPEM), nil
}
