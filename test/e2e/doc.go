// Package e2e runs the real automator and proxy binaries against each other
// and checks the guarantees of DESIGN.md from the outside: every test starts
// its own automator (its own data directory and ports), its own proxy
// instances and scripts, and talks to them only through the public
// interface (the CLIs, the gRPC API, the files in the data directory).
//
// The binaries are built once per run, by TestMain, from this checkout, or
// are the ones `make test` built once for every package (OPSGATE_TEST_BIN,
// internal/proctest). Set E2E_RACE=1 to build them with the race detector.
package e2e
