package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/clihelp"
	"github.com/opsgate/opsgate/internal/printable"
	"github.com/opsgate/opsgate/internal/prose"
	"github.com/opsgate/opsgate/internal/secretfile"
)

const apikeyUsage = "usage: automator apikey create NAME --data-dir DIR [--db DSN] (--accounts A,B | --all-accounts) | apikey list --data-dir DIR [--db DSN] [--json] | apikey revoke ID --data-dir DIR [--db DSN]"

// cmdAPIKey is `automator apikey create | list | revoke`.
func cmdAPIKey(ctx context.Context, args []string, env Env) error {
	if len(args) == 0 {
		return errors.New(apikeyUsage)
	}
	switch args[0] {
	case "create":
		return cmdAPIKeyCreate(ctx, args[1:], env)
	case "list":
		return cmdAPIKeyList(ctx, args[1:], env)
	case "revoke":
		return cmdAPIKeyRevoke(ctx, args[1:], env)
	}
	return errors.New(apikeyUsage)
}

// openDataStore loads the settings of a data directory and opens its
// store, or the one db (--db) names.
func openDataStore(ctx context.Context, dir, db string) (store.Store, error) {
	cfg, err := loadConfig(dir, db)
	if err != nil {
		return nil, err
	}
	return openStore(ctx, dir, cfg)
}

// cmdAPIKeyCreate makes an API key and prints its secret, once, on stdout
// (so `> FILE` makes an --api-key-file); the secret is not stored, only
// its SHA-256. Least privilege: the key must name the accounts it may use,
// or say --all-accounts.
func cmdAPIKeyCreate(ctx context.Context, args []string, env Env) error {
	fs := newFlags("apikey create", env)
	dir := fs.String("data-dir", "", "the automator's data directory")
	db := dbFlag(fs)
	accounts := fs.String("accounts", "", "comma-separated accounts the key may use (execute on, read and cancel units of)")
	all := fs.Bool("all-accounts", false, "the key may use every account, present and future")
	pos, err := clihelp.ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	name, err := oneArg(fs, "NAME", pos, "usage: automator apikey create NAME --data-dir DIR [--db DSN] (--accounts A,B | --all-accounts)")
	if err != nil {
		return err
	}
	if err := checkAPIKeyName(name); err != nil {
		return err
	}
	var scope []string
	switch {
	case *all && *accounts != "":
		return errors.New("give --accounts or --all-accounts, not both")
	case !*all && strings.TrimSpace(*accounts) == "":
		return errors.New("--accounts A,B is required (the accounts the key may use), or --all-accounts")
	case !*all:
		var bad []string
		for _, a := range strings.Split(*accounts, ",") {
			a = strings.TrimSpace(a)
			if !server.AccountNamePattern.MatchString(a) {
				bad = append(bad, a)
			}
			scope = append(scope, a)
		}
		switch {
		case len(bad) == 1:
			return fmt.Errorf("--accounts: %s is not an account name (%s)", printable.Quote(bad[0]), server.AccountNamePattern)
		case len(bad) > 1:
			return fmt.Errorf("--accounts: %s are not account names (%s)", quotedList(bad), server.AccountNamePattern)
		}
		scope = store.DistinctAccounts(scope) // as the store keeps it
	}
	if err := secretOut(env.Stdout, env.Stderr, "the API key"); err != nil {
		return err
	}
	st, err := openDataStore(ctx, *dir, *db)
	if err != nil {
		return err
	}
	defer st.Close()
	var missing []string
	for _, a := range scope {
		if _, err := st.AccountGet(ctx, a); errors.Is(err, store.ErrNotFound) {
			missing = append(missing, a)
		} else if err != nil {
			return err
		}
	}
	switch {
	case len(missing) == 1:
		return fmt.Errorf("--accounts: account %q not found; create it first (`automator account create %s --data-dir %s`%s)", missing[0], missing[0], shellArg(*dir), withSameDB(*db))
	case len(missing) > 1:
		return fmt.Errorf("--accounts: accounts %s not found; create them first (`automator account create NAME --data-dir %s` for each%s)", quotedList(missing), shellArg(*dir), withSameDB(*db))
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	id := "ak_" + hex.EncodeToString(b[:])
	secret, err := crypto.NewToken("oak_")
	if err != nil {
		return err
	}
	now := time.Now()
	_, err = st.APIKeyCreate(ctx, store.APIKeyCreateParams{ID: id, Hash: crypto.HashToken(secret), Name: name, Accounts: scope, Now: now,
		Audit: cliEvent(store.AuditEvent{At: now, Kind: store.AuditAPIKeyCreated, Detail: fmt.Sprintf("%s (%s) for %s", id, name, scopeText(scope))})})
	if errors.Is(err, store.ErrNotFound) {
		// Deleted since it was looked up above.
		return fmt.Errorf("--accounts: an account was deleted meanwhile, and no key was made: %w", err)
	}
	if err != nil {
		return fmt.Errorf("storing the API key: %w", err)
	}
	if _, err := fmt.Fprintln(env.Stdout, secret); err != nil {
		return fmt.Errorf("API key %s (%s) is made, but its secret could not be written (%w), and is nowhere else; revoke it with `automator apikey revoke %s --data-dir %s`%s and make another", id, name, err, id, *dir, withSameDB(*db))
	}
	fmt.Fprintf(env.Stderr, "automator: API key %s (%s) for %s; its secret is on stdout, shown this once\n", id, name, scopeText(scope))
	return nil
}

// quotedList is names quoted, as `"a", "b" and "c"`.
func quotedList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = printable.Quote(n)
	}
	return prose.And(q)
}

// maxAPIKeyName is the longest API key name, in characters.
const maxAPIKeyName = 64

// checkAPIKeyName refuses a name that `apikey list` and `automator audit`
// could not show as it is: not UTF-8, or holding a character that is not
// printable (a control character, C1 ones included, which a terminal may
// take for an escape sequence; a bidi override or another format
// character, which reorders or hides what follows). Its length is counted
// in characters, so a name in any script gets the same 64.
func checkAPIKeyName(name string) error {
	n := utf8.RuneCountInString(name)
	if n == 0 || n > maxAPIKeyName || !utf8.ValidString(name) || printable.FirstNotShown(name) >= 0 {
		return fmt.Errorf("API key name %q must be 1 to %d printable characters", name, maxAPIKeyName)
	}
	return nil
}

func scopeText(accounts []string) string {
	if len(accounts) == 0 {
		return "every account"
	}
	return "account " + strings.Join(accounts, ", ")
}

func cmdAPIKeyList(ctx context.Context, args []string, env Env) error {
	fs := newFlags("apikey list", env)
	l := listing{
		dir: fs.String("data-dir", "", "the automator's data directory"),
		db:  dbFlag(fs),
	}
	asJSON := fs.Bool("json", false, "one JSON object per key")
	if err := clihelp.ParseNoArgs(fs, args); err != nil {
		return err
	}
	st, _, err := l.open(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	keys, err := st.APIKeyList(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(env.Stdout)
		for _, k := range keys {
			var revoked *time.Time
			if !k.RevokedAt.IsZero() {
				revoked = &k.RevokedAt
			}
			accounts := k.Accounts
			if accounts == nil {
				accounts = []string{}
			}
			if err := enc.Encode(struct {
				ID          string     `json:"id"`
				Name        string     `json:"name"`
				AllAccounts bool       `json:"all_accounts"`
				Accounts    []string   `json:"accounts"`
				CreatedAt   time.Time  `json:"created_at"`
				RevokedAt   *time.Time `json:"revoked_at"`
			}{k.ID, k.Name, len(k.Accounts) == 0, accounts, k.CreatedAt, revoked}); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tACCOUNTS\tCREATED\tREVOKED")
	for _, k := range keys {
		accounts, revoked := "*", "-"
		if len(k.Accounts) > 0 {
			accounts = strings.Join(k.Accounts, ",")
		}
		if !k.RevokedAt.IsZero() {
			revoked = k.RevokedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, accounts, k.CreatedAt.UTC().Format(time.RFC3339), revoked)
	}
	return tw.Flush()
}

// cmdAPIKeyRevoke revokes a key. Every automator sharing the database
// refuses it from the first call made after the command returned (see
// store.CachedCredentials).
func cmdAPIKeyRevoke(ctx context.Context, args []string, env Env) error {
	fs := newFlags("apikey revoke", env)
	dir := fs.String("data-dir", "", "the automator's data directory")
	db := dbFlag(fs)
	pos, err := clihelp.ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if _, err := oneArg(fs, "ID", pos, "usage: automator apikey revoke ID --data-dir DIR [--db DSN]"); err != nil {
		return err
	}
	st, err := openDataStore(ctx, *dir, *db)
	if err != nil {
		return err
	}
	defer st.Close()
	keys, err := st.APIKeyList(ctx)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(keys, func(k store.APIKey) bool { return k.ID == pos[0] })
	if i < 0 {
		return notFound(keys, pos[0], *dir, *db)
	}
	if k := keys[i]; !k.RevokedAt.IsZero() {
		fmt.Fprintf(env.Stdout, "API key %s (%s) was already revoked at %s\n", k.ID, k.Name, k.RevokedAt.UTC().Format(time.RFC3339))
		return nil
	}
	now := time.Now()
	k, err := st.APIKeyRevoke(ctx, store.APIKeyRevokeParams{ID: pos[0], Now: now,
		Audit: cliEvent(store.AuditEvent{At: now, Kind: store.AuditAPIKeyRevoked, Detail: fmt.Sprintf("%s (%s)", keys[i].ID, keys[i].Name)})})
	if errors.Is(err, store.ErrNotFound) {
		return notFound(keys, pos[0], *dir, *db)
	}
	if errors.Is(err, store.ErrWithdrawalInterrupted) {
		// The revoke is committed, with its audit event.
		fmt.Fprintf(env.Stderr, "automator: warning: %v; the revoke stands\n", err)
	} else if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "API key %s (%s) revoked; it is refused from now on\n", k.ID, k.Name)
	if path := filepath.Join(*dir, config.FileAPIKey); holdsKey(path, k) {
		fmt.Fprintf(env.Stderr, "automator: %s held this key: exec, work wait and work cancel with --data-dir are refused until a new one is put there: `automator apikey create admin --all-accounts --data-dir %s > %s`%s\n", path, *dir, path, withSameDB(*db))
	}
	return nil
}

// notFound is apikey revoke's error for an ID that is none of keys', in
// the data directory dir (and the database db, its --db).
func notFound(keys []store.APIKey, id, dir, db string) error {
	return fmt.Errorf("no API key of ID %q%s; see `automator apikey list --data-dir %s`%s", id, namedSo(keys, id), shellArg(dir), withSameDB(db))
}

// namedSo is, for an ID given to apikey revoke that is no key's, what
// to say of the keys whose name it is, if any: the IDs to give instead.
func namedSo(keys []store.APIKey, name string) string {
	var ids []string
	for _, k := range keys {
		if k.Name != name {
			continue
		}
		if k.RevokedAt.IsZero() {
			ids = append(ids, k.ID)
		} else {
			ids = append(ids, k.ID+" (revoked)")
		}
	}
	switch len(ids) {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf(": apikey revoke takes the ID, and the key named %q is %s", name, ids[0])
	}
	return fmt.Sprintf(": apikey revoke takes the ID, and the keys named %q are %s", name, strings.Join(ids, ", "))
}

// holdsKey reports whether the file at path holds the secret of API key k.
func holdsKey(path string, k store.APIKey) bool {
	secret, err := secretfile.Read(path)
	if err != nil {
		return false
	}
	return secret != "" && crypto.TokenEqual(crypto.HashToken(secret), k.Hash)
}

// readMaster reads a data directory's master key.
func readMaster(dir string) (crypto.MasterKey, error) {
	return crypto.ReadMasterKeyFile(filepath.Join(dir, config.FileMasterKey))
}
