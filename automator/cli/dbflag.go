package cli

import (
	"flag"

	"github.com/opsgate/opsgate/automator/config"
)

// dbFlag defines --db on fs, as every command that opens the data
// directory's database has it (serve, the account, apikey and listing
// commands, audit, cert renew, backup, restore): the database it names
// overrides db in automator.yaml, so a command given the --db its serve
// was given acts on that serve's database. (init's --db, which chooses the
// database to write in automator.yaml, is its own.)
func dbFlag(fs *flag.FlagSet) *string {
	return fs.String("db", "", "database DSN (overrides automator.yaml)")
}

// loadConfig reads the settings of the data directory dir for a command
// that opens its database: db, the command's --db, overrides automator.yaml's.
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
	return cfg, nil
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
