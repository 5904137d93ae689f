//go:build linux

package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore"
)

// TestReindexRepairsADamagedPostgreSQLIndexAndNamesADamagedTable: with a
// page of the queue's index overwritten on disk (PostgreSQL stopped, as a
// bad sector would, then started), the store's claims fail as a damaged
// database (store.IsDamaged: PostgreSQL's data_corrupted); Reindex (what
// `automator repair` runs) rebuilds the indexes from the rows and every
// queued unit is claimed. With a page of the work table itself
// overwritten, Reindex names that table and rebuilds the others.
func TestReindexRepairsADamagedPostgreSQLIndexAndNamesADamagedTable(t *testing.T) {
	t.Parallel()
	pg := startPG(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	now := time.Now()
	st, err := pgstore.Open(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AccountCreate(ctx, store.AccountCreateParams{Name: "acme", TokenHash: []byte("t"), KeyID: 1, SealedKey: []byte("k"), Now: now}); err != nil {
		t.Fatal(err)
	}
	const units = 300
	for i := range units {
		if _, err := st.WorkEnqueue(ctx, store.WorkEnqueueParams{ID: fmt.Sprintf("w-%06d", i), Account: "acme", KeyID: 1,
			SealedCommand: []byte(strings.Repeat("c", 200)), Now: now, Deadline: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	index, table := relationFile(t, ctx, pg.URL, "work_queued"), relationFile(t, ctx, pg.URL, "work")
	st.Close()

	// The index's first page after its metapage.
	damageWhileStopped(t, pg, index, 1)
	st, err = pgstore.Open(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	claim := func() ([]store.Work, error) {
		ids := make([]string, units)
		for i := range ids {
			ids[i] = fmt.Sprintf("c-%d-%d", time.Now().UnixNano(), i)
		}
		return st.WorkClaim(ctx, store.WorkClaimParams{Account: "acme", InstanceID: "i-1", Max: units, ClaimIDs: ids, Now: now})
	}
	if _, err := claim(); !store.IsDamaged(err) {
		t.Fatalf("WorkClaim with the queue's index damaged: %v; want an error store.IsDamaged reports", err)
	}
	tables, indexes, err := st.Reindex(ctx)
	if err != nil || tables == 0 || indexes <= tables {
		t.Fatalf("Reindex: %d tables, %d indexes, %v", tables, indexes, err)
	}
	if ws, err := claim(); err != nil || len(ws) != units {
		t.Fatalf("WorkClaim after Reindex: %d units, %v; want the %d queued", len(ws), err, units)
	}
	st.Close()

	damageWhileStopped(t, pg, table, 0)
	st, err = pgstore.Open(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rebuilt, _, err := st.Reindex(ctx)
	var dt *store.DamagedTablesError
	if !errors.As(err, &dt) || !slices.Equal(dt.Tables, []string{"work"}) || !store.IsDamaged(err) || rebuilt != tables-1 {
		t.Fatalf("Reindex with the work table damaged: %d tables rebuilt, %v; want a DamagedTablesError naming work, and the other %d rebuilt", rebuilt, err, tables-1)
	}
}

// relationFile is the path of the first file of relation name, in the
// cluster's data directory (relative to it).
func relationFile(t *testing.T, ctx context.Context, url, name string) string {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var path string
	if err := conn.QueryRow(ctx, `SELECT pg_relation_filepath($1::regclass)`, name).Scan(&path); err != nil {
		t.Fatal(err)
	}
	return path
}

// damageWhileStopped stops the cluster (a checkpoint writes every page),
// overwrites the first 200 bytes of block (8 KiB pages) of the relation
// file rel, its page header among them, and starts the cluster again, its
// buffers empty: the next read of that block reads the damage.
func damageWhileStopped(t *testing.T, pg *pgServer, rel string, block int64) {
	t.Helper()
	if err := pg.stop(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(pg.dir, "data", rel), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteAt([]byte(strings.Repeat("\xff", 200)), block*8192)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := pg.start(); err != nil {
		t.Fatal(err)
	}
}
