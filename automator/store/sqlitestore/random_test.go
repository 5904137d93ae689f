package sqlitestore

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/storetest"
)

// TestRandomized runs the randomized test of the units' contract
// (storetest.RunRandomized) on one database file. SQLite serves one
// automator: both workers' stores are the same one, unless
// STORETEST_RANDOM_SQLITE_TWO=1 opens the file twice (two processes'
// stores on one file, each waiting on the other's lock).
func TestRandomized(t *testing.T) {
	storetest.RunRandomized(t, func(t *testing.T) (store.Store, store.Store) {
		path := filepath.Join(t.TempDir(), "automator.db")
		a := open(t, path)
		if os.Getenv("STORETEST_RANDOM_SQLITE_TWO") == "1" {
			return a, open(t, path)
		}
		return a, a
	})
}
