package cli

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store/pgstore"
)

// dbFlag defines --db on fs, as every command that opens the data
// directory's database has it (serve, the account, apikey and listing
// commands, audit, cert renew, backup, restore): the database it names
// overrides db in automator.yaml, so a command given the --db its serve
// was given acts on that serve's database. A relative SQLite path is
// relative to the data directory, for every command (config.DBPath), as
// db in automator.yaml is. (init's --db, which chooses the
// database to write in automator.yaml, is its own.)
func dbFlag(fs *flag.FlagSet) *string {
	return fs.String("db", "", "database DSN (overrides automator.yaml): a SQLite file, relative to the data directory, or a PostgreSQL URL")
}

// loadConfig reads the settings of the data directory dir for a command
// that opens its database: db, the command's --db, overrides automator.yaml's.
// Without --db, the command is refused while a serve of dir runs on
// another database (serving.yaml names it): a serve given --db, whose
// database the command would not open.
func loadConfig(dir, db string) (config.Config, error) {
	if err := requireFlag("data-dir", dir); err != nil {
		return config.Config{}, err
	}
	cfg, err := config.Load(dir)
	if err != nil {
		return config.Config{}, err
	}
	if db != "" {
		cfg.DB = db
	}
	// As serve checks it: a db it refuses would be opened as something
	// else (a URL that does not parse, as a SQLite file named after it).
	if err := config.CheckDB(cfg.DB); err != nil {
		src := filepath.Join(dir, config.FileConfig)
		if db != "" {
			src = "--db"
		}
		return config.Config{}, fmt.Errorf("invalid settings in %s: %w", src, err)
	}
	if db != "" {
		return cfg, nil
	}
	if served, ok := servesAnotherDB(dir, cfg); ok {
		return config.Config{}, fmt.Errorf("an automator serve of %s runs on the database %s, not on %s, which db in %s names: give this command the --db that serve was given (%s says so; a serve that was killed leaves it behind, so if no serve of %s runs, remove it)",
			dir, served, servedDB(dir, cfg), config.FileConfig, filepath.Join(dir, config.FileServing), dir)
	}
	return cfg, nil
}

// servedDB names the database of cfg as serve records it in serving.yaml:
// a SQLite file by its absolute path, a PostgreSQL URL without its
// password (as serve's log names it).
func servedDB(dir string, cfg config.Config) string {
	if pgstore.IsDSN(cfg.DB) {
		return pgstore.Redact(cfg.DB)
	}
	p := cfg.DBPath(dir)
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// servesAnotherDB returns the database a serve of dir runs on, from
// serving.yaml, when it is not the one cfg names; ok is false when it is
// the same, or unknown (no serve runs, or one of an earlier release). A
// SQLite file is the same by any path that leads to it. Two PostgreSQL
// URLs that differ may still reach one database (through a relay or a
// pooler, by another name of its host), which their text cannot tell: a
// serve on PostgreSQL is on another database only where automator.yaml
// names a SQLite file.
func servesAnotherDB(dir string, cfg config.Config) (served string, ok bool) {
	s, found, err := config.ReadServing(dir)
	if err != nil || !found || s.DB == "" {
		return "", false
	}
	mine := servedDB(dir, cfg)
	switch servedPG, minePG := pgstore.IsDSN(s.DB), pgstore.IsDSN(mine); {
	case s.DB == mine, servedPG && minePG:
		return "", false
	case !servedPG && !minePG:
		a, aerr := os.Stat(s.DB)
		b, berr := os.Stat(mine)
		if aerr == nil && berr == nil && os.SameFile(a, b) {
			return "", false
		}
	}
	return s.DB, true
}

// serveDBHint is what a hint of exec, work wait or work cancel naming a
// command that opens the database of the data directory dir adds when the
// serve of dir runs on another database than automator.yaml's: that
// command must be given serve's --db.
func serveDBHint(dir string) string {
	cfg, err := config.Load(dir)
	if err != nil {
		return ""
	}
	if served, ok := servesAnotherDB(dir, cfg); ok {
		return fmt.Sprintf(" (with the --db serve was given: it runs on %s)", served)
	}
	return ""
}

// withSameDB is what a hint naming another command adds when the command
// printing it was given --db (db): the DSN, which may hold a password, is
// not repeated.
func withSameDB(db string) string {
	if db == "" {
		return ""
	}
	return " (with the same --db)"
}
