package store_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/opsgate/opsgate/automator/store"
)

// TestIsStorageFull: the SQLite store's sentinel and PostgreSQL's disk_full
// (SQLSTATE 53100), however wrapped, are a full disk; other errors,
// PostgreSQL's other resource errors among them, are not.
func TestIsStorageFull(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"the sentinel, wrapped", fmt.Errorf("enqueueing work: %w", fmt.Errorf("%w: disk I/O", store.ErrStorageFull)), true},
		{"PostgreSQL disk_full, wrapped", fmt.Errorf("completing work: %w", &pgconn.PgError{Code: "53100", Message: "could not extend file"}), true},
		{"PostgreSQL out_of_memory", &pgconn.PgError{Code: "53200"}, false},
		{"PostgreSQL unique_violation", &pgconn.PgError{Code: "23505"}, false},
		{"another error", errors.New("database or disk is busy"), false},
		{"nil", nil, false},
	} {
		if got := store.IsStorageFull(c.err); got != c.want {
			t.Errorf("%s: IsStorageFull(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
