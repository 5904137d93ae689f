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

// TestIsDamaged: the sentinel and PostgreSQL's data_corrupted and
// index_corrupted (SQLSTATE XX001, XX002), however wrapped, are a damaged
// database; PostgreSQL's other internal errors and a full disk are not.
// (SQLite's SQLITE_CORRUPT, from a real damaged file, is sqlitestore's
// TestRebuildOfADatabaseWhoseIndexesAreDamagedLosesNothing.)
func TestIsDamaged(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"the sentinel, wrapped", fmt.Errorf("repairing: %w", store.ErrDamaged), true},
		{"PostgreSQL data_corrupted, wrapped", fmt.Errorf("claiming work: %w", &pgconn.PgError{Code: "XX001", Message: "invalid page in block 7"}), true},
		{"PostgreSQL index_corrupted", &pgconn.PgError{Code: "XX002", Message: "index \"work_queued\" contains unexpected zero page"}, true},
		{"PostgreSQL internal_error", &pgconn.PgError{Code: "XX000"}, false},
		{"a full disk", store.ErrStorageFull, false},
		{"another error", errors.New("database disk image is malformed"), false},
		{"nil", nil, false},
	} {
		if got := store.IsDamaged(c.err); got != c.want {
			t.Errorf("%s: IsDamaged(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
