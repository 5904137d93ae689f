// Package leaktest holds the goleak options of this repository's tests:
// the goroutines of ours that live as long as the process by design, which
// a test that ran a script (or an automator that did) leaves behind
// without leaking anything.
package leaktest

import "go.uber.org/goleak"

// Options are the options of every goleak check here: it ignores the
// goroutine scripts are started from on Linux (proxy/runner's spawnLoop),
// which keeps its thread to the end.
func Options() []goleak.Option {
	return []goleak.Option{goleak.IgnoreTopFunction("github.com/opsgate/opsgate/proxy/runner.spawnLoop")}
}
