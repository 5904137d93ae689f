// Package proctest is the harness the process tests (test/e2e,
// test/service, test/replicas, test/browser) share: it builds the real
// automator and proxy binaries once per test binary, runs CLIs to the end,
// runs long-lived children in their own process groups with their output in
// a log file (whose tail is shown when a test fails), polls for what a child
// shows through files and ports, and dials an automator's caller API.
//
// Only tests import it: the binaries it builds must never depend on it
// (test/deps checks that).
package proctest
