// Package chaos proves the guarantees of DESIGN.md under faults, the way
// Jepsen-style suites test databases: it runs a real automator and several
// real proxy instances on loopback, drives many concurrent executeOnProxy
// callers, injects faults at random moments from a seeded schedule, records
// what every caller saw and what every script execution did, and checks the
// whole history against the guarantees.
//
// The package holds the parts that are not tied to a test run: the history
// and its checker (Check), the fault-injecting TCP relay that sits between
// each proxy and the automator (Relay), and an HTTP CONNECT proxy like the
// outbound proxies of customer networks (ConnectProxy). The harness, the
// fault schedule and the tests are in the _test files: `make test` runs a
// short fixed-seed run, `make chaos` a long one with a random seed (see
// chaos_test.go and docs/failure-semantics.md). TestChaosPG (`make chaos
// CHAOS_STORE=pg`) runs replicas of the automator on PostgreSQL instead,
// each instance's relay balancing its connections over them with health
// checks, each replica reaching the database through a relay, and the
// callers' Go clients reaching each replica through one: besides the faults
// of the proxies and the network it kills, pauses (SIGSTOP) and resets one
// replica, cuts one off from PostgreSQL, crashes and stops PostgreSQL, and
// resets and cuts the callers' connections.
package chaos
