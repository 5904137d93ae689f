// Package testparallel raises, for one package's tests, how many of its
// parallel tests go test runs at once, unless the command line says.
//
// go test's default is GOMAXPROCS: two on the CI machines. That suits
// tests that compute; a package whose tests mostly wait (on hung peers,
// keepalives, deadlines, child processes, fsyncs) leaves its slot in
// `make test` idle meanwhile. Such a package calls Default from its
// TestMain, with the figures that justify it beside the call.
//
// Only tests import it (test/deps checks that).
package testparallel

import (
	"flag"
	"strconv"
)

// Default sets -test.parallel to n unless the command line set it. It
// parses the command line, so call it from TestMain before m.Run.
func Default(n int) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
			panic("testparallel: " + err.Error()) // only outside a test binary
		}
	}
}
