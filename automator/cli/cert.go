package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/clihelp"
)

// cmdCertRenew makes a new server certificate signed by the data
// directory's CA, for the public URL's host and loopback, and puts it in
// place of server.pem and server.key (each written beside it with the owner
// of the file it replaces, then renamed over it, key first), so that an
// automator running as the data directory's owner reads the pair root
// renewed. A running automator serves it to new connections within
// pki.DefaultReloadEvery, without a restart; profiles stay valid (they
// trust the CA).
func cmdCertRenew(ctx context.Context, args []string, env Env) error {
	fs := newFlags("cert renew", env)
	dir := fs.String("data-dir", "", "the automator's data directory")
	db := dbFlag(fs)
	if err := clihelp.ParseNoArgs(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig(*dir, *db)
	if err != nil {
		return err
	}
	// Held from the start: a renewal refused during a restore (whose
	// database would lose its audit record) renews nothing.
	lock, err := lockForCommand(*dir)
	if err != nil {
		return err
	}
	defer lock.Release()
	host, err := config.PublicHost(cfg.PublicURL)
	if err != nil {
		return fmt.Errorf("public_url: %w", err)
	}
	path := func(name string) string { return filepath.Join(*dir, name) }
	var ca pki.Bundle
	if ca.CertPEM, err = os.ReadFile(path(config.FileCACert)); err != nil {
		return fmt.Errorf("reading the CA certificate: %w", err)
	}
	if ca.KeyPEM, err = os.ReadFile(path(config.FileCAKey)); err != nil {
		return fmt.Errorf("reading the CA key: %w", err)
	}
	now := time.Now()
	b, err := pki.NewServer(ca, pki.ServerHosts(host), now)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{{config.FileKey, b.KeyPEM, 0o600}, {config.FileCert, b.CertPEM, 0o644}} {
		tmp := path(f.name + ".renew")
		_ = os.Remove(tmp)
		if err := pki.WriteFile(tmp, f.data, f.mode); err != nil {
			return fmt.Errorf("writing %s: %w", tmp, err)
		}
		if err := keepOwner(tmp, path(f.name)); err != nil {
			_ = os.Remove(tmp)
			return fmt.Errorf("giving %s the owner of %s: %w", tmp, f.name, err)
		}
		if err := os.Rename(tmp, path(f.name)); err != nil {
			return fmt.Errorf("putting %s in place: %w", f.name, err)
		}
	}
	// (Under a serve of an earlier release, the record would migrate its
	// database: the renewal is made, and not recorded.)
	err = refuseMigratingUnderServe(ctx, *dir, cfg)
	var st store.Store
	if err == nil {
		st, err = openLockedStore(ctx, *dir, cfg)
	}
	if err == nil {
		audit(ctx, st, store.AuditEvent{At: now, Kind: store.AuditCertRenewed, Detail: "server certificate for " + host}, env)
		st.Close()
	} else if !errors.Is(err, context.Canceled) {
		fmt.Fprintf(env.Stderr, "automator: warning: the renewal is not in the audit log: %v\n", err)
	}
	fmt.Fprintf(env.Stdout, "renewed %s for %s; a running automator serves it within %v\n", path(config.FileCert), host, pki.DefaultReloadEvery)
	return nil
}
