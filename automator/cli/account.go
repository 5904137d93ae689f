package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/clihelp"
	"github.com/opsgate/opsgate/internal/printable"
)

// accountArgs parses the arguments of an account command that names one
// account (create, delete, rotate-*): the flags of fs, and NAME, which must
// be one valid account name; --data-dir (dir) is required. usage is the
// error for a missing or extra NAME.
func accountArgs(fs *flag.FlagSet, args []string, dir *string, usage string) (string, error) {
	pos, err := clihelp.ParseInterspersed(fs, args)
	if err != nil {
		return "", err
	}
	name, err := oneArg(fs, "NAME", pos, usage)
	if err != nil {
		return "", err
	}
	if !server.AccountNamePattern.MatchString(name) {
		return "", fmt.Errorf("account name %s must match %s", printable.Quote(name), server.AccountNamePattern)
	}
	return name, requireFlag("data-dir", *dir)
}

// cmdAccountCreate adds an account and prints its proxy profile (YAML).
func cmdAccountCreate(ctx context.Context, args []string, env Env) error {
	fs := newFlags("account create", env)
	dir := fs.String("data-dir", "", "the automator's data directory")
	db := dbFlag(fs)
	name, err := accountArgs(fs, args, dir, "usage: automator account create NAME --data-dir DIR [--db DSN]")
	if err != nil {
		return err
	}
	if err := secretOut(env.Stdout, env.Stderr, "the account's profile, with its token"); err != nil {
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
	cfg, master, caPEM, st := d.cfg, d.master, d.caPEM, d.st

	token, err := crypto.NewToken("opt_")
	if err != nil {
		return err
	}
	key, err := crypto.NewKey(1)
	if err != nil {
		return err
	}
	sealedKey, err := master.SealKey(name, key)
	if err != nil {
		return err
	}
	now := time.Now()
	_, err = st.AccountCreate(ctx, store.AccountCreateParams{
		Name:      name,
		TokenHash: crypto.HashToken(token),
		KeyID:     key.ID,
		SealedKey: sealedKey,
		Now:       now,
		Audit:     cliEvent(store.AuditEvent{At: now, Kind: store.AuditAccountCreated, Account: name, Detail: fmt.Sprintf("key %d", key.ID)}),
	})
	if errors.Is(err, store.ErrExists) {
		// Said with how to get a profile: a second `account create NAME
		// > proxy.yaml` has emptied that file by now (a review).
		return fmt.Errorf("account %q already exists, and its profile is printed only when it is created: `automator account rotate-token %s --data-dir %s`%s prints one with a new token (its proxies keep the old one for the overlap, 24h by default)", name, name, *dir, withSameDB(*db))
	}
	if errors.Is(err, store.ErrBeingDeleted) {
		return fmt.Errorf("account %q is still being deleted: an earlier `automator account delete` stopped before it moved every unit of the old account under its tombstone; a serving automator finishes that as it starts and every hour, or run `automator account delete %s --data-dir %s`%s again to finish now, then create the account", name, name, *dir, withSameDB(*db))
	}
	if err != nil {
		return err // it names the account
	}
	if _, err := fmt.Fprint(env.Stdout, Profile(name, cfg.PublicURL, token, key.String(), string(caPEM))); err != nil {
		// The profile was the only copy of the token: say so, rather
		// than exit 0 with nothing saved.
		return fmt.Errorf("account %q is created, but its profile could not be written (%w), and its token is nowhere else; get a new profile with `automator account rotate-token %s --data-dir %s --overlap 0`%s", name, err, name, *dir, withSameDB(*db))
	}
	noteLoopbackProfile(env.Stderr, cfg.PublicURL, *dir)
	return nil
}

// noteLoopbackProfile says on w when a profile's automator_url (the data
// directory's public_url) is a loopback address: `init` without
// --public-url writes https://localhost:8443, and a profile made from it
// looks right until a proxy on another host dials itself. Such a profile
// still serves a proxy on this host (a demo, a test), so it is a note, not
// an error.
func noteLoopbackProfile(w io.Writer, publicURL, dir string) {
	host, err := config.PublicHost(publicURL)
	if err != nil || config.RequireLoopback(net.JoinHostPort(host, "0")) != nil {
		return
	}
	fmt.Fprintf(w, "automator: note: this profile's automator_url %s is a loopback address: only a proxy on this host reaches it. For proxies on other hosts, set public_url in %s to an address they reach, run `automator cert renew --data-dir %s` (the server certificate then names that host), restart serve, and give the profiles that automator_url\n",
		publicURL, filepath.Join(dir, config.FileConfig), dir)
}

// Profile renders the proxy configuration for an account: the profile
// (automator_url, token, key, ca_cert) and the local settings to fill in.
func Profile(account, url, token, key, caPEM string) string {
	return ProfileWithPrevious(account, url, token, key, nil, caPEM)
}

// ProfileWithPrevious is Profile with the account's previous keys still in
// use after a rotate-key (previous_keys): a proxy on this profile opens the
// units sealed with them as well as the new ones.
func ProfileWithPrevious(account, url, token, key string, previous []string, caPEM string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Proxy profile of account %q. It holds secrets: keep it mode 0600.\n", account)
	fmt.Fprintf(&b, "automator_url: %s\n", url)
	fmt.Fprintf(&b, "token: %s\n", token)
	fmt.Fprintf(&b, "key: %s\n", key)
	if len(previous) > 0 {
		b.WriteString("previous_keys:\n")
		for _, k := range previous {
			fmt.Fprintf(&b, "  - %s\n", k)
		}
	}
	b.WriteString("ca_cert: |\n")
	for _, line := range strings.Split(strings.TrimRight(caPEM, "\n"), "\n") {
		b.WriteString("  " + line + "\n")
	}
	b.WriteString("# Local settings (flags of `proxy run` override them):\n")
	b.WriteString("# scripts_dir: /etc/proxy/scripts   # required, here or as --scripts-dir\n")
	b.WriteString("# instance_id: host-a               # defaults to the host name\n")
	b.WriteString("# allowed_env: [DEPLOY_TARGET]      # the only variables a command may set (none without it)\n")
	b.WriteString("# max_concurrency: 4                # units run at once\n")
	return b.String()
}

// accountAdmin is what the account commands need of a data directory.
type accountAdmin struct {
	cfg    config.Config
	master crypto.MasterKey
	caPEM  []byte
	st     store.Store
	// db is the command's --db ("" when it was not given), for its hints.
	db string
}

// profileReady refuses, before anything is changed, to make a profile no
// proxy could use: with a public_url serve refuses (the profile's
// automator_url), or a ca.pem that holds no certificate (what the profile
// trusts).
func (d accountAdmin) profileReady(dir string) error {
	if _, err := config.PublicHost(d.cfg.PublicURL); err != nil {
		return fmt.Errorf("public_url in %s: %w: a profile made from it would not reach the automator (serve refuses it too); set it to the https://HOST:PORT proxies reach, then run the command again; nothing was changed", filepath.Join(dir, config.FileConfig), err)
	}
	if _, err := pki.ParseCertPEM(d.caPEM); err != nil {
		return fmt.Errorf("%s: %w: a profile made from it would trust no automator; put the data directory's CA certificate back (from a backup of the data directory), then run the command again; nothing was changed", filepath.Join(dir, config.FileCACert), err)
	}
	return nil
}

// openAccountAdmin loads the settings, the master key and the CA
// certificate of a data directory and opens its store, or the one db
// (--db) names; the caller closes it.
// A master key that opens none of the accounts' keys is refused: keys
// sealed with it would not open in the automator.
func openAccountAdmin(ctx context.Context, dir, db string) (accountAdmin, error) {
	cfg, err := loadConfig(dir, db)
	if err != nil {
		return accountAdmin{}, err
	}
	master, err := readMaster(dir)
	if err != nil {
		return accountAdmin{}, err
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, config.FileCACert))
	if err != nil {
		return accountAdmin{}, fmt.Errorf("reading CA certificate: %w", err)
	}
	st, err := openStore(ctx, dir, cfg)
	if err != nil {
		return accountAdmin{}, err
	}
	if _, err := checkMasterKey(ctx, st, master, dir, cfg); err != nil {
		st.Close()
		return accountAdmin{}, err
	}
	return accountAdmin{cfg: cfg, master: master, caPEM: caPEM, st: st, db: db}, nil
}
