// Package replicas runs several real automator replicas on one PostgreSQL
// database, with real proxy instances polling different replicas and
// callers spread over all of them, and checks from the outside what
// DESIGN.md's "Scale" promises: every unit runs exactly once whichever
// replica queued it and whichever replica its claimer polls, a caller
// waiting on one replica is completed by a result posted to another, a
// replica's death loses nothing, and replicas starting together migrate an
// empty database once.
//
// The PostgreSQL server is AUTOMATOR_TEST_POSTGRES, or a throwaway cluster
// (scripts/pg-start.sh) when it is unset; each test gets its own schema.
// The binaries are built once per run, by TestMain, from this checkout, or
// are the ones `make test` built once for every package (OPSGATE_TEST_BIN,
// internal/proctest).
//
// BenchmarkCrossReplicaWakeUp measures how long a unit queued on one replica
// takes to reach an instance long-polling another.
package replicas
