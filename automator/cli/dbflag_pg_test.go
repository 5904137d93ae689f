package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/automator/config"
)

// TestAPostgreSQLDatabaseSpeltOtherwiseByServeIsNotRefused: a serve given
// a --db that reaches automator.yaml's PostgreSQL database another way (a
// relay, a pooler, another name of the host) serves the same database, and
// two URLs cannot tell whether they do; a command without --db is not
// refused for it. A serve on PostgreSQL where automator.yaml names a SQLite
// file is on another database, whatever the URL: that is refused. (No
// database is opened: loadConfig decides before.)
func TestAPostgreSQLDatabaseSpeltOtherwiseByServeIsNotRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, yamlDB, servedDB string
		refused                bool
	}{
		{"another address of the same database", "postgres://automator@db.internal:5432/automator", "postgres://automator@127.0.0.1:6432/automator", false},
		{"a SQLite file in automator.yaml", "", "postgres://automator@127.0.0.1:6432/automator", true},
		{"PostgreSQL in automator.yaml, serve on a SQLite file", "postgres://automator@db.internal:5432/automator", "/var/lib/elsewhere/automator.db", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg := config.Default("https://127.0.0.1:8443")
			if c.yamlDB != "" {
				cfg.DB = c.yamlDB
			}
			if err := config.Save(dir, cfg); err != nil {
				t.Fatal(err)
			}
			if err := config.WriteServing(dir, config.Serving{GRPC: "127.0.0.1:8443", HTTP: "127.0.0.1:8080", DB: c.servedDB}); err != nil {
				t.Fatal(err)
			}
			_, err := loadConfig(dir, "")
			if c.refused {
				if err == nil || !strings.Contains(err.Error(), c.servedDB) || !strings.Contains(err.Error(), filepath.Join(dir, config.FileServing)) {
					t.Fatalf("loadConfig without --db = %v; want refused naming %s and serving.yaml", err, c.servedDB)
				}
				return
			}
			if err != nil {
				t.Fatalf("loadConfig without --db = %v; want automator.yaml's database", err)
			}
		})
	}
}
