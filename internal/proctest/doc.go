// Package proctest is the harness the process tests (test/e2e,
// test/service, test/replicas, test/browser; test/chaos for its binaries)
// share: it finds the real automator and proxy binaries `make test` built
// once for every package (EnvBin, OPSGATE_TEST_BIN) or, run without them,
// builds them once per test binary; it runs CLIs to the end, runs
// long-lived children in their own process groups with their output in a
// log file (whose tail is shown when a test fails), polls for what a child
// shows through files and ports, and dials an automator's caller API.
//
// Only tests import it: the binaries it builds must never depend on it
// (test/deps checks that).
package proctest
