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
	"github.com/opsgate/opsgate/automator/store/pgstore"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/clihelp"
	"github.com/opsgate/opsgate/internal/secretfile"
)

// initDraft is the directory of the data directory where init writes its
// automator.yaml until the admin API key is stored in the database.
const initDraft = ".init"

// cmdInit makes a data directory: settings, master key, CA, server
// certificate, database and an admin API key. When it fails (an unreachable
// --db, a database another init made) it removes what it made, so that it
// can be run again once the cause is fixed.
func cmdInit(ctx context.Context, args []string, env Env) (err error) {
	flags := newFlags("init", env)
	dir := flags.String("data-dir", "", "data directory to create")
	publicURL := flags.String("public-url", config.DefaultPublicURL, "how proxies reach this automator, https://HOST:PORT")
	db := flags.String("db", "", "database DSN (default: SQLite file automator.db in the data directory)")
	if err := clihelp.ParseNoArgs(flags, args); err != nil {
		return err
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

	_, statErr := os.Stat(*dir)
	madeDir := errors.Is(statErr, fs.ErrNotExist)
	if err := os.MkdirAll(*dir, 0o700); err != nil {
		return fmt.Errorf("creating data directory: %w", err)
	}
	if _, err := os.Stat(filepath.Join(*dir, config.FileConfig)); err == nil {
		return fmt.Errorf("%s is already initialised (%s exists); use another --data-dir", *dir, config.FileConfig)
	}
	if who := secretfile.WritableByOthers(*dir); who != "" && !madeDir {
		// Made here, it is 0700; one that was there keeps its mode, and
		// the master key and CA key would sit where others may replace
		// them (serve warns of it, after the fact).
		return fmt.Errorf("--data-dir %s is writable by %s: whoever may write it may replace the master key, the CA's key and the config init writes there; %s, or give a directory that does not exist yet (init makes it, mode 0700)", *dir, who, secretfile.RestrictDir)
	}
	path := func(name string) string { return filepath.Join(*dir, name) }
	// made is every file this init created (each is created anew, never
	// over an existing one), removed again if it fails: a half-made data
	// directory would otherwise refuse the next init ("file exists").
	var made []string
	defer func() {
		if err == nil {
			return
		}
		for i := len(made) - 1; i >= 0; i-- {
			_ = os.Remove(made[i])
		}
		if madeDir {
			_ = os.Remove(*dir) // only when empty
		}
	}()
	created := func(p string, err error) {
		if err == nil || !errors.Is(err, fs.ErrExist) {
			made = append(made, p)
		}
	}

	_, err = crypto.WriteMasterKeyFile(path(config.FileMasterKey))
	created(path(config.FileMasterKey), err)
	if err != nil {
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
		err := pki.WriteFile(path(f.name), f.data, f.mode)
		created(path(f.name), err)
		if err != nil {
			return fmt.Errorf("writing %s: %w", f.name, err)
		}
	}

	if !pgstore.IsDSN(cfg.DB) {
		// A SQLite file this init creates goes too on failure, with the
		// files SQLite keeps beside it; one that was there stays.
		dbPath := cfg.DBPath(*dir)
		if _, err := os.Stat(dbPath); errors.Is(err, fs.ErrNotExist) {
			made = append(made, dbPath, dbPath+"-wal", dbPath+"-shm", dbPath+"-journal")
		}
	}
	// The admin key's file, and automator.yaml (in initDraft inside the
	// data directory, renamed into place last: automator.yaml is what says
	// the directory is initialised), are written before the key is stored
	// in the database: once it is, a failure could not remove it from
	// there, and every later init on that database would be refused
	// ("already has the admin API key"), no directory holding the key.
	secret, err := crypto.NewToken("oak_")
	if err != nil {
		return err
	}
	err = pki.WriteFile(path(config.FileAPIKey), []byte(secret+"\n"), 0o600)
	created(path(config.FileAPIKey), err)
	if err != nil {
		return fmt.Errorf("writing %s: %w", config.FileAPIKey, err)
	}
	draft := path(initDraft)
	err = os.Mkdir(draft, 0o700)
	created(draft, err)
	if err != nil {
		return fmt.Errorf("writing %s: %w", config.FileConfig, err)
	}
	draftConfig := filepath.Join(draft, config.FileConfig)
	made = append(made, draftConfig) // removed before draft (made is removed last first)
	if err := config.Save(draft, cfg); err != nil {
		return fmt.Errorf("writing %s: %w", config.FileConfig, err)
	}

	// openStore takes the serve lock, its file made if missing.
	if _, err := os.Stat(path(config.FileServeLock)); errors.Is(err, fs.ErrNotExist) {
		made = append(made, path(config.FileServeLock))
	}
	st, err := createStore(ctx, *dir, cfg)
	if err != nil {
		return err
	}
	defer st.Close() // before the removal of made, deferred above
	if _, err := st.APIKeyCreate(ctx, store.APIKeyCreateParams{
		ID:   "admin",
		Hash: crypto.HashToken(secret),
		Name: "admin key made by init",
		Now:  now,
		// The admin key is a credential like those of `apikey create`,
		// and may use every account: its creation is audited as theirs is.
		Audit: cliEvent(store.AuditEvent{At: now, Kind: store.AuditAPIKeyCreated, Detail: "admin (admin key made by init) for " + scopeText(nil)}),
	}); errors.Is(err, store.ErrExists) {
		return fmt.Errorf("the database %s already has the admin API key of an earlier `automator init`: initialise a database once, then copy that data directory to every replica "+
			"(an init stopped after storing the key, before putting its %s in place, left it in %s of its data directory: move it into that directory to finish it)",
			describeDB(*dir, cfg), config.FileConfig, filepath.Join(initDraft, config.FileConfig))
	} else if err != nil {
		return fmt.Errorf("storing the admin API key: %w", err)
	}
	// Stored: from here on, the data directory holding the key is kept.
	if err := os.Rename(draftConfig, path(config.FileConfig)); err != nil {
		made = nil
		return fmt.Errorf("putting %s in place: %w; the admin API key is stored in the database and in %s: move %s to %s to finish the data directory",
			config.FileConfig, err, path(config.FileAPIKey), draftConfig, path(config.FileConfig))
	}
	_ = os.Remove(draft)
	fmt.Fprintf(env.Stdout, "initialised %s for %s\nnext: automator serve --data-dir %s\n", *dir, cfg.PublicURL, *dir)
	return nil
}
