package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
)

// cmdInit makes a data directory: settings, master key, CA, server
// certificate, database and an admin API key.
func cmdInit(ctx context.Context, args []string, env Env) error {
	fs := newFlags("init", env)
	dir := fs.String("data-dir", "", "data directory to create")
	publicURL := fs.String("public-url", config.DefaultPublicURL, "how proxies reach this automator, https://HOST:PORT")
	db := fs.String("db", "", "database DSN (default: SQLite file automator.db in the data directory)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("init takes no arguments, got %q", fs.Args())
	}
	if err := requireFlag("data-dir", *dir); err != nil {
		return err
	}
	cfg := config.Default(*publicURL)
	if *db != "" {
		cfg.DB = *db
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid settings: %w", err)
	}
	host, _ := config.PublicHost(cfg.PublicURL)

	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return fmt.Errorf("creating data directory: %w", err)
	}
	if _, err := os.Stat(filepath.Join(*dir, config.FileConfig)); err == nil {
		return fmt.Errorf("%s is already initialised (%s exists); use another --data-dir", *dir, config.FileConfig)
	}
	path := func(name string) string { return filepath.Join(*dir, name) }

	if _, err := crypto.WriteMasterKeyFile(path(config.FileMasterKey)); err != nil {
		return fmt.Errorf("writing master key: %w", err)
	}
	now := time.Now()
	ca, err := pki.NewCA("automator CA "+host, now)
	if err != nil {
		return err
	}
	srv, err := pki.NewServer(ca, pki.ServerHosts(host), now)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{
		{config.FileCACert, ca.CertPEM, 0o644},
		{config.FileCAKey, ca.KeyPEM, 0o600},
		{config.FileCert, srv.CertPEM, 0o644},
		{config.FileKey, srv.KeyPEM, 0o600},
	} {
		if err := pki.WriteFile(path(f.name), f.data, f.mode); err != nil {
			return fmt.Errorf("writing %s: %w", f.name, err)
		}
	}

	st, err := openStore(ctx, *dir, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	secret, err := crypto.NewToken("oak_")
	if err != nil {
		return err
	}
	if _, err := st.APIKeyCreate(ctx, store.APIKeyCreateParams{
		ID:   "admin",
		Hash: crypto.HashToken(secret),
		Name: "admin key made by init",
		Now:  now,
	}); err != nil {
		return fmt.Errorf("storing the admin API key: %w", err)
	}
	if err := pki.WriteFile(path(config.FileAPIKey), []byte(secret+"\n"), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", config.FileAPIKey, err)
	}
	if err := config.Save(*dir, cfg); err != nil {
		return fmt.Errorf("writing %s: %w", config.FileConfig, err)
	}
	fmt.Fprintf(env.Stdout, "initialised %s for %s\nnext: automator serve --data-dir %s\n", *dir, cfg.PublicURL, *dir)
	return nil
}
