package runner

import (
	"context"
	"fmt"
	"os"
	"time"
)

// proxyChildEnv names the directory of the script that a child of this test
// binary runs through the runner, with a reaper, as a proxy would.
const proxyChildEnv = "RUNNER_TEST_PROXY_CHILD"

// proxyUnregisteredEnv, set beside proxyChildEnv, makes the child hold
// every script it starts back from the reaper (Reaper.beforeRegister):
// a proxy that dies a moment after a script's start.
const proxyUnregisteredEnv = "RUNNER_TEST_PROXY_UNREGISTERED"

// runAsProxy runs the script s.sh of dir (with dir as its argument) through
// Run with a reaper, as the proxy does, and waits to be killed.
func runAsProxy(dir string) int {
	r := NewReaper(func(err error) { fmt.Fprintln(os.Stderr, "reaper:", err) })
	if os.Getenv(proxyUnregisteredEnv) != "" {
		holdBackFromReaper(r)
	}
	_, err := Run(context.Background(), Spec{
		ScriptsDir: dir, Script: "s.sh", Args: []string{dir},
		Deadline: time.Now().Add(10 * time.Minute), Reaper: r,
	})
	fmt.Fprintln(os.Stderr, "Run returned:", err)
	return 1
}
