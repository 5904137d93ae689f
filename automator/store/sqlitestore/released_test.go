package sqlitestore

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// releasedMigrations pins the SHA-256 of the SQL of every released step.
// A database is migrated from whatever step it was left at, so a step
// edited after its release leaves the databases that ran it as released
// different from new ones: step 1 was, on 2026-11-29 (the idempotency
// keys), and databases of the first releases served every enqueue with
// "no such column" until addIdempotencyKeys mended them. A change is a new
// step; add the new step's hash here once it is released.
var releasedMigrations = map[int]string{
	1:  "0dc7a4986affaca56c4f1d1a3f205b32fdea38ede9fa33ee2e3be5317526732b",
	2:  "3309d8cf257e5ed4bddc5b6504e330bd1fa43082c0e97a7a36ce45bba93218d0",
	3:  "cc3c3ce2d9e24063a4bb75b85f25211fb0c9e55346c01f575e208a841b6ef052",
	4:  "de6abcb8d7edee47e9b5a4e3c6efb39567a20caf108089e93a5537c0086d5ff8",
	5:  "d12da1032078c6ce071147edd26c20807eec28dc6c44db0701ecb0333ea3627b",
	6:  "035cce1d975c2a658ca3cd69d3aed3cd35f670dbaea760bbcc88501b4e9b4cbd",
	7:  "1b1fbb5f6fe698deddef75d659764d0edfb9e84623f589ee304a2837b5e76ed3",
	8:  "93a048da7cdee98d86c5be4f9e9977aa07b23a4f5c6f835d5513062a7c32cff1",
	9:  "b774935cb9730cff5dd0ad095403e17e114798517c779a24022a8030b2384400",
	10: "0c7b9fe318cf8a278b9ead56c0079a1636237b06691d3c6db7757261644614c1",
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
