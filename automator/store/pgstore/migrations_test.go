package pgstore

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
)

// releasedMigrations pins the SHA-256 of the SQL of every released step.
// In a rolling upgrade (docs/several-automators.md) the first new replica
// migrates while the old ones keep serving, and a database is migrated
// from whatever step it was left at: a step edited after its release
// would leave databases that ran it as released different from new ones.
// A change is a new step; add the new step's hash here once it is
// released.
var releasedMigrations = map[int]string{
	1: "1b3e1f71cab5c6cfb190eabb37ab8dcbbc99e483f5fcb6250bb482f7a8ba977c",
	2: "f956729803f1e331931f4c25d21a389e46d8fe154aa41e9308dcae54ad4877e8",
	3: "a8bff299d4e00516b80c292ea44d86489d3c7233fb0609b4a2f67d2b9b47dbe9",
	4: "d54adec950f6a5ec7a965b8ba263455aa022b8cfbd13f395c609b0f50c1a2f25",
	5: "2e09580728143009ffa0d8cf7544ca25ebfb1596743036b688e10b28052d44ed",
	6: "8e096c779272449444c769cebb647cd731e62a2258462016e6b736d2ddc14d91",
}

func TestReleasedMigrationsAreNeverEdited(t *testing.T) {
	t.Parallel()
	for _, m := range migrations {
		want, ok := releasedMigrations[m.version]
		if !ok {
			continue // not released yet
		}
		sum := sha256.Sum256([]byte(m.sql))
		if got := hex.EncodeToString(sum[:]); got != want {
			t.Errorf("migration %d (%s) was edited after its release (SHA-256 of its SQL %s, released %s): a released step is never edited, a change is a new step", m.version, m.name, got, want)
		}
	}
}

// schemaShape is what a schema holds that code of an older version relies
// on: the columns it names (with the type and nullability it wrote them
// with) and what can refuse a write (constraints, unique indexes,
// triggers), by table.
type schemaShape struct {
	columns  map[string]map[string]column // table, column
	refusers map[string]map[string]string // table, name: definition
}

type column struct {
	typ      string
	nullable bool
	hasDef   bool
}

func shapeOf(t *testing.T, tx pgx.Tx) schemaShape {
	t.Helper()
	ctx := t.Context()
	s := schemaShape{columns: map[string]map[string]column{}, refusers: map[string]map[string]string{}}
	rows, err := tx.Query(ctx, `SELECT table_name::text, column_name::text, data_type::text, is_nullable = 'YES', column_default IS NOT NULL
FROM information_schema.columns WHERE table_schema = current_schema() AND table_name <> 'schema_migrations'`)
	if err != nil {
		t.Fatal(err)
	}
	var table, name string
	var c column
	if _, err := pgx.ForEachRow(rows, []any{&table, &name, &c.typ, &c.nullable, &c.hasDef}, func() error {
		if s.columns[table] == nil {
			s.columns[table] = map[string]column{}
		}
		s.columns[table][name] = c
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	rows, err = tx.Query(ctx, `
SELECT c.relname::text, 'constraint ' || k.conname, pg_get_constraintdef(k.oid)
FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
WHERE c.relnamespace = current_schema()::regnamespace
UNION ALL
SELECT c.relname::text, 'unique index ' || i.relname, pg_get_indexdef(x.indexrelid)
FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class c ON c.oid = x.indrelid
WHERE c.relnamespace = current_schema()::regnamespace AND x.indisunique
UNION ALL
SELECT c.relname::text, 'trigger ' || g.tgname, pg_get_triggerdef(g.oid)
FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
WHERE c.relnamespace = current_schema()::regnamespace AND NOT g.tgisinternal`)
	if err != nil {
		t.Fatal(err)
	}
	var def string
	if _, err := pgx.ForEachRow(rows, []any{&table, &name, &def}, func() error {
		if s.refusers[table] == nil {
			s.refusers[table] = map[string]string{}
		}
		s.refusers[table][name] = def
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestEachMigrationOnlyAdds: during a rolling upgrade the old replicas
// keep serving on the schema the first new replica migrated, so each step
// must leave every earlier step's statements working. For each version,
// against the one before: no table or column is removed, none changes
// type or becomes NOT NULL; a column added to an existing table has a
// default or takes NULL (an old replica's INSERT names its own columns
// and leaves it out); and no constraint, unique index or trigger is added
// to an existing table (it could refuse a write the old code makes).
func TestEachMigrationOnlyAdds(t *testing.T) {
	t.Parallel()
	var prev schemaShape
	for n := 1; n <= len(migrations); n++ {
		_, pool := atVersion(t, n)
		var cur schemaShape
		err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
			cur = shapeOf(t, tx)
			return nil
		})
		pool.Close()
		if err != nil {
			t.Fatal(err)
		}
		if n > 1 {
			compareShapes(t, migrations[n-1], prev, cur)
		}
		prev = cur
	}
}

func compareShapes(t *testing.T, m migration, prev, cur schemaShape) {
	t.Helper()
	step := fmt.Sprintf("migration %d (%s)", m.version, m.name)
	for table, cols := range prev.columns {
		now, ok := cur.columns[table]
		if !ok {
			t.Errorf("%s removes table %s, which older replicas use", step, table)
			continue
		}
		for name, c := range cols {
			d, ok := now[name]
			switch {
			case !ok:
				t.Errorf("%s removes column %s.%s, which older replicas name", step, table, name)
			case d.typ != c.typ:
				t.Errorf("%s changes column %s.%s from %s to %s", step, table, name, c.typ, d.typ)
			case c.nullable && !d.nullable:
				t.Errorf("%s makes column %s.%s NOT NULL, which older replicas may leave NULL", step, table, name)
			case c.hasDef && !d.hasDef && !d.nullable:
				t.Errorf("%s drops the default of NOT NULL column %s.%s, which older replicas may leave out", step, table, name)
			}
		}
		for name, d := range now {
			if _, ok := cols[name]; !ok && !d.nullable && !d.hasDef {
				t.Errorf("%s adds column %s.%s NOT NULL without a default: an older replica's INSERT into %s, which does not name it, fails", step, table, name, table)
			}
		}
		for name, def := range cur.refusers[table] {
			if _, ok := prev.refusers[table][name]; !ok {
				t.Errorf("%s adds %s to table %s (%s), which may refuse a write an older replica makes", step, name, table, def)
			}
		}
	}
}
