package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
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
// place of server.pem and server.key (both written beside them with the
// owner of the file each replaces, then renamed over them, key first), so
// that an automator running as the data directory's owner reads the pair
// root renewed. A running automator serves it to new connections within
// pki.DefaultReloadEvery, without a restart; profiles stay valid (they
// trust the CA). A renewal that fails changes neither file (replacePair).
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
	if err := replacePair(path, b); err != nil {
		return err
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

// replacePair puts b in place of server.key and server.pem in the data
// directory path names. Both are written (and given their owner) beside
// them first, as server.key.renew and server.pem.renew, so that a failure
// there changes neither file; then the key is renamed into place, then the
// certificate. The old key is kept until then as server.key.renew-old (a
// hard link, else a copy), and put back if the certificate cannot be: a
// new key beside the old certificate is a pair serve refuses ("private key
// does not match public key"). Nothing it made is left behind, unless
// putting the old key back fails too: then the error names what holds
// what, and how to mend it.
func replacePair(path func(string) string, b pki.Bundle) (err error) {
	keyPath, certPath := path(config.FileKey), path(config.FileCert)
	keyTmp, certTmp := keyPath+".renew", certPath+".renew"
	oldKey := keyPath + ".renew-old"
	var made []string
	defer func() {
		if err != nil {
			for _, p := range made {
				_ = os.Remove(p)
			}
		}
	}()
	for _, f := range []struct {
		name, tmp string
		data      []byte
		mode      os.FileMode
	}{{config.FileKey, keyTmp, b.KeyPEM, 0o600}, {config.FileCert, certTmp, b.CertPEM, 0o644}} {
		_ = os.Remove(f.tmp) // one an earlier renewal left
		err := pki.WriteFile(f.tmp, f.data, f.mode)
		if err == nil || !errors.Is(err, fs.ErrExist) {
			made = append(made, f.tmp)
		}
		if err != nil {
			return fmt.Errorf("writing %s: %w; %s and %s are unchanged", f.tmp, err, config.FileKey, config.FileCert)
		}
		if err := keepOwner(f.tmp, path(f.name)); err != nil {
			return fmt.Errorf("giving %s the owner of %s: %w; %s and %s are unchanged", f.tmp, f.name, err, config.FileKey, config.FileCert)
		}
	}
	_ = os.Remove(oldKey)
	kept, err := keepCopy(keyPath, oldKey)
	if err != nil {
		return fmt.Errorf("keeping the old %s as %s until the new pair is in place: %w; %s and %s are unchanged", config.FileKey, oldKey, err, config.FileKey, config.FileCert)
	}
	if kept {
		made = append(made, oldKey)
	}
	if err := os.Rename(keyTmp, keyPath); err != nil {
		return fmt.Errorf("putting %s in place: %w; %s and %s are unchanged", config.FileKey, err, config.FileKey, config.FileCert)
	}
	if err := os.Rename(certTmp, certPath); err != nil {
		if !kept {
			// There was no key to put back: the pair was broken already.
			return fmt.Errorf("putting %s in place: %w; %s (which was missing) is the new key, and %s the old certificate: rename %s to %s once the cause is fixed, or run `automator cert renew` again",
				config.FileCert, err, keyPath, certPath, certTmp, certPath)
		}
		if rerr := os.Rename(oldKey, keyPath); rerr != nil {
			made = nil // each holds the only copy of a key or certificate
			return fmt.Errorf("putting %s in place: %w; %s is the new key already, and putting the old one back failed: %v: "+
				"rename %s to %s (the new certificate, the pair renewed) or %s to %s (the old key, the pair as it was)",
				config.FileCert, err, keyPath, rerr, certTmp, certPath, oldKey, keyPath)
		}
		return fmt.Errorf("putting %s in place: %w; %s and %s are unchanged (the old key put back)", config.FileCert, err, config.FileKey, config.FileCert)
	}
	_ = os.Remove(oldKey)
	return nil
}

// keepCopy makes dst a copy of src that keeps its content, mode and owner:
// a hard link, else (a file system without them) a copy. It is false, and
// makes nothing, when there is no src.
func keepCopy(src, dst string) (bool, error) {
	fi, err := os.Stat(src)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if os.Link(src, dst) == nil {
		return true, nil
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return false, err
	}
	if err := pki.WriteFile(dst, data, fi.Mode().Perm()); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			_ = os.Remove(dst)
		}
		return false, err
	}
	if err := keepOwner(dst, src); err != nil {
		_ = os.Remove(dst)
		return false, err
	}
	return true, nil
}
