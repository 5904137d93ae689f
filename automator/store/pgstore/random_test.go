package pgstore

import (
	"testing"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/automator/store/storetest"
)

// TestRandomized runs the randomized test of the units' contract on two
// replicas (two stores) sharing one database (storetest.RunRandomized).
func TestRandomized(t *testing.T) {
	storetest.RunRandomized(t, func(t *testing.T) (store.Store, store.Store) {
		dsn := pgtest.DSN(t)
		return open(t, dsn), open(t, dsn)
	})
}
