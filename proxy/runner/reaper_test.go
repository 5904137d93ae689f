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

// runAsProxy runs the script s.sh of dir (with dir as its argument) through
// Run with a reaper, as the proxy does, and waits to be killed.
func runAsProxy(dir string) int {
	r := NewReaper(func(err error) { fmt.Fprintln(os.Stderr, "reaper:", err) })
	_, err := Run(context.Background(), Spec{
		ScriptsDir: dir, Script: "s.sh", Args: []string{dir},
		Deadline: time.Now().Add(10 * time.Minute), Reaper: r,
	})
	fmt.Fprintln(os.Stderr, "Run returned:", err)
	return 1
}
