package store

import "slices"

// AutomatorTables are the tables an automator's database (a PostgreSQL
// schema) has at every schema version: schema_migrations, and accounts and
// work, which the first step (version 1) makes and no later one drops or
// renames. A table named schema_migrations alone does not make a database
// an automator's: many other programs' migration tools keep one
// (golang-migrate, Rails, dbmate, Ecto), with versions of their own.
var AutomatorTables = []string{"schema_migrations", "accounts", "work"}

// MissingAutomatorTables returns those of AutomatorTables that tables
// lacks: none for an automator's database.
func MissingAutomatorTables(tables []string) []string {
	var missing []string
	for _, name := range AutomatorTables {
		if !slices.Contains(tables, name) {
			missing = append(missing, name)
		}
	}
	return missing
}
