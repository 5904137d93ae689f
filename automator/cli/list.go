package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/clihelp"
)

// now is the listings' clock ("5s ago", online or not); tests fix it.
var now = time.Now

// listing is what every listing command shares: the data directory whose
// store it reads (as `replicas` does), and --json.
type listing struct {
	dir, db *string
	json    *bool
}

func listingFlags(fs *flag.FlagSet) listing {
	return listing{
		dir:  fs.String("data-dir", "", "the automator's data directory"),
		db:   dbFlag(fs),
		json: fs.Bool("json", false, "print JSON (for scripts) instead of a table"),
	}
}

// accountListHint says how to list the accounts of the store l opens, to
// be run as printed. A DSN given with --db, which may hold a password, is
// not repeated: the hint says to give it again.
func (l listing) accountListHint() string {
	return "`automator account list --data-dir " + shellArg(*l.dir) + "` lists them" + withSameDB(*l.db)
}

// shellArg is s as one word of a POSIX shell's command line, quoted when
// it holds anything but letters, digits and -_./:=,+@%.
func shellArg(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// open reads the settings and opens the store.
func (l listing) open(ctx context.Context) (store.Store, config.Config, error) {
	cfg, err := loadConfig(*l.dir, *l.db)
	if err != nil {
		return nil, config.Config{}, err
	}
	st, err := openStore(ctx, *l.dir, cfg)
	if err != nil {
		return nil, config.Config{}, err
	}
	return st, cfg, nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// ago says how long before t0 t was, in whole seconds: "never" for zero.
func ago(t0, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return max(t0.Sub(t), 0).Round(time.Second).String() + " ago"
}

// utc formats a time for tables; "-" for zero.
func utc(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// ---- automator account list ----

type accountJSON struct {
	Account         string    `json:"account"`
	Status          string    `json:"status"`
	Queued          int       `json:"queued"`
	OldestQueuedAt  time.Time `json:"oldest_queued_at,omitzero"`
	InFlight        int       `json:"in_flight"`
	Instances       int       `json:"instances"`
	InstancesOnline int       `json:"instances_online"`
	// InstancesRefused polled within the online window and were refused:
	// they hold no usable key of the account, or an expired account token.
	InstancesRefused int       `json:"instances_refused"`
	LastPollAt       time.Time `json:"last_poll_at,omitzero"`
	// Deleting is set for an account being deleted (status "deleting").
	Deleting *deletingJSON `json:"deleting,omitempty"`
}

// deletingJSON is an account whose deletion committed with units left to
// move under its tombstone (store.AccountsBeingDeleted): its name is taken
// until they have moved.
type deletingJSON struct {
	Tombstone       string `json:"tombstone"`
	UnitsLeftToMove int    `json:"units_left_to_move"`
}

// statusDeleting is the status `account list` gives an account being
// deleted.
const statusDeleting = "deleting"

// cmdAccountList lists the accounts with their queues and instances, and
// after them the accounts being deleted, whose names are taken meanwhile.
func cmdAccountList(ctx context.Context, args []string, env Env) error {
	fs := newFlags("account list", env)
	l := listingFlags(fs)
	if err := clihelp.ParseNoArgs(fs, args); err != nil {
		return err
	}
	st, cfg, err := l.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	t0 := now()
	stats, err := st.AccountStats(ctx, store.AccountStatsParams{OnlineSince: t0.Add(-server.InstanceOnlineWithin(cfg.PollWindow))})
	if err != nil {
		return err
	}
	deleting, err := st.AccountsBeingDeleted(ctx)
	if err != nil {
		return err
	}
	if *l.json {
		out := make([]accountJSON, 0, len(stats)+len(deleting))
		for _, a := range stats {
			out = append(out, accountJSON{
				Account: a.Account, Status: string(server.StatusOf(a)), Queued: a.Queued, OldestQueuedAt: a.OldestQueuedAt,
				InFlight: a.Claimed, Instances: a.Instances, InstancesOnline: a.InstancesOnline, InstancesRefused: a.InstancesRefused,
				LastPollAt: a.LastPollAt,
			})
		}
		for _, d := range deleting {
			out = append(out, accountJSON{Account: d.Name, Status: statusDeleting,
				Deleting: &deletingJSON{Tombstone: d.Tombstone, UnitsLeftToMove: d.Units}})
		}
		slices.SortStableFunc(out, func(a, b accountJSON) int { return strings.Compare(a.Account, b.Account) })
		return writeJSON(env.Stdout, out)
	}
	if len(stats) == 0 {
		if _, err := fmt.Fprintln(env.Stdout, "no account yet; make one with `automator account create NAME`"); err != nil {
			return err
		}
	} else {
		w := table(env.Stdout)
		fmt.Fprintln(w, "ACCOUNT\tSTATUS\tQUEUED\tOLDEST QUEUED\tIN FLIGHT\tINSTANCES ONLINE\tLAST POLL")
		for _, a := range stats {
			oldest := "-"
			if a.Queued > 0 {
				oldest = max(t0.Sub(a.OldestQueuedAt), 0).Round(time.Second).String()
			}
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\t%d of %d\t%s\n", a.Account, server.StatusOf(a), a.Queued, oldest,
				a.Claimed, a.InstancesOnline, a.Instances, ago(t0, a.LastPollAt))
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if err := printRefused(env.Stdout, stats); err != nil {
			return err
		}
	}
	if len(deleting) == 0 {
		return nil
	}
	// Apart from the table, whose columns they would widen.
	fmt.Fprintln(env.Stdout, "\naccounts being deleted, their names taken until their units have moved under their tombstones (a serving automator moves them as it starts and every hour; so does `automator account delete NAME`):")
	w := table(env.Stdout)
	for _, d := range deleting {
		fmt.Fprintf(w, "%s\t%s, %d units left to move under %q\n", d.Name, statusDeleting, d.Units, d.Tombstone)
	}
	return w.Flush()
}

// printRefused says, after the account table (whose columns it would
// widen), how many instances of each account poll and are refused (for want
// of a usable key, for an expired account token, or for a wrong key), and the fix: a stranded or refused account with such
// instances has proxies up, not down.
func printRefused(out io.Writer, stats []store.AccountStats) error {
	var refused []store.AccountStats
	for _, a := range stats {
		if a.InstancesRefused > 0 {
			refused = append(refused, a)
		}
	}
	if len(refused) == 0 {
		return nil
	}
	fmt.Fprintln(out, "\ninstances refused: they poll but hold no usable key of their account or an expired account token (a profile of before a key rotation), or a key that is not the account's key of its id (another account's key line); install the account's latest profile on them (`automator instances --account NAME` names them and the cause):")
	w := table(out)
	for _, a := range refused {
		fmt.Fprintf(w, "%s\t%d refused\n", a.Account, a.InstancesRefused)
	}
	return w.Flush()
}

// ---- automator instances ----

type instanceJSON struct {
	InstanceID string    `json:"instance_id"`
	Hostname   string    `json:"hostname"`
	Version    string    `json:"version"`
	LastPollAt time.Time `json:"last_poll_at"`
	InFlight   int       `json:"in_flight"`
	Online     bool      `json:"online"`
	// Status is the STATUS column: online, stopped (its last poll said it
	// was stopping), refused (it polls, and its polls are refused: it holds
	// no usable key of the account, or its account token expired) or
	// offline.
	Status string `json:"status"`
	// RefusedCause, when its last poll was refused (status refused, or
	// offline since), says why: "no_usable_key", "token_expired" (the
	// account token of before a rotation whose overlap has ended) or
	// "wrong_key" (it holds a key that is not the account's key of its id:
	// another account's, or a mistyped one).
	RefusedCause string `json:"refused_cause,omitempty"`
	// RefusedKeyIDs, when its last poll was refused for want of a usable
	// key or for a wrong key (status refused, or offline since), are the
	// key ids it held.
	RefusedKeyIDs []uint32 `json:"refused_key_ids,omitempty"`
}

// cmdInstances lists the instances of an account.
func cmdInstances(ctx context.Context, args []string, env Env) error {
	fs := newFlags("instances", env)
	l := listingFlags(fs)
	account := fs.String("account", "", "the account whose instances to list")
	if err := clihelp.ParseNoArgs(fs, args); err != nil {
		return err
	}
	if err := requireFlag("account", *account); err != nil {
		return err
	}
	st, cfg, err := l.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := accountExists(ctx, st, *account, l); err != nil {
		return err
	}
	list, err := st.InstanceList(ctx, *account)
	if err != nil {
		return err
	}
	t0 := now()
	since := t0.Add(-server.InstanceOnlineWithin(cfg.PollWindow))
	if *l.json {
		out := make([]instanceJSON, 0, len(list))
		for _, in := range list {
			st := server.StatusOfInstance(in, since)
			out = append(out, instanceJSON{InstanceID: in.InstanceID, Hostname: in.Hostname, Version: in.Version,
				LastPollAt: in.LastPollAt, InFlight: in.InFlight, Online: st == server.InstanceOnline, Status: string(st),
				RefusedCause: string(in.RefusedCause()), RefusedKeyIDs: in.RefusedKeyIDs})
		}
		return writeJSON(env.Stdout, out)
	}
	if len(list) == 0 {
		_, err := fmt.Fprintf(env.Stdout, "no instance of account %s has polled yet\n", *account)
		return err
	}
	w := table(env.Stdout)
	fmt.Fprintln(w, "INSTANCE\tHOST\tVERSION\tLAST POLL\tIN FLIGHT\tSTATUS")
	for _, in := range list {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s (%s)\t%d\t%s\n", in.InstanceID, in.Hostname, in.Version,
			utc(in.LastPollAt), ago(t0, in.LastPollAt), in.InFlight, instanceStatusText(in, since))
	}
	return w.Flush()
}

// instanceStatusText is the STATUS column: the status word, and for an
// instance whose last poll was refused, why (the key ids it holds, none
// usable, or one not the account's key of its id, or its expired account
// token) and the fix.
func instanceStatusText(in store.Instance, since time.Time) string {
	st := server.StatusOfInstance(in, since)
	if !in.Refused() || st == server.InstanceStopped {
		return string(st)
	}
	if in.RefusedWrongKey {
		if st == server.InstanceRefused {
			return fmt.Sprintf("%s (its polls are refused: it holds key ids %v, and a key among them is not the account's key of its id: another account's key, or a mistyped one; install the account's profile)", st, in.RefusedKeyIDs)
		}
		return fmt.Sprintf("%s (its last poll was refused: it held key ids %v, and a key among them was not the account's key of its id: another account's key, or a mistyped one; install the account's profile)", st, in.RefusedKeyIDs)
	}
	if in.RefusedTokenExpired {
		if st == server.InstanceRefused {
			return fmt.Sprintf("%s (its polls are refused: its account token expired, rotated and its overlap ended; install the account's latest profile)", st)
		}
		return fmt.Sprintf("%s (its last poll was refused: its account token had expired; install the account's latest profile)", st)
	}
	if st == server.InstanceRefused {
		return fmt.Sprintf("%s (its polls are refused: it holds key ids %v, none usable; install the account's latest profile)", st, in.RefusedKeyIDs)
	}
	return fmt.Sprintf("%s (its last poll was refused: it held key ids %v, none usable then; install the account's latest profile)", st, in.RefusedKeyIDs)
}

// accountExists refuses an --account that names no account, rather than
// let a listing of it say only that nothing matches.
func accountExists(ctx context.Context, st store.Store, account string, l listing) error {
	if _, err := st.AccountGet(ctx, account); errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("--account: there is no account %q; %s", account, l.accountListHint())
	} else if err != nil {
		return err
	}
	return nil
}
