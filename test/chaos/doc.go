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
//
// The soak (`make soak`, TestSoak, skipped without -soak.duration) is the
// package's leak check: a real automator on durable SQLite and four real
// proxy instances under a steady mix of units for 20 minutes, with mild
// disturbances (connection resets and short black holes through the
// relays, proxies restarted or crashed, the callers' connection reset),
// sampled every few seconds by SoakSampler (memory, open files and threads
// from /proc; goroutines and heap from the automator's /metrics; the
// database's size) and judged by SoakVerdict, a pure function that compares
// the last quarter of the run with the second, per process role and
// resource, against the allowances DefaultSoakAllowances gives (see
// soak.go and docs/failure-semantics.md, "The soak").
package chaos
