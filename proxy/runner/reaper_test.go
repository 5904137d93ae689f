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

// proxyChildWaitEnv, set to 1, makes that child wait for a file "go" in
// its directory before it runs the script.
const proxyChildWaitEnv = "RUNNER_TEST_PROXY_CHILD_WAIT"

// runAsProxy runs the script s.sh of dir (with dir as its argument) through
// Run with a reaper, as the proxy does, and waits to be killed.
func runAsProxy(dir string) int {
	if os.Getenv(proxyChildWaitEnv) == "1" {
		// Until the test has done what it does before the first script
		// (which starts the reaper).
		for {
			if _, err := os.Stat(dir + "/go"); err == nil {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	r := NewReaper(func(err error) { fmt.Fprintln(os.Stderr, "reaper:", err) })
	_, err := Run(context.Background(), Spec{
		ScriptsDir: dir, Script: "s.sh", Args: []string{dir},
		Deadline: time.Now().Add(10 * time.Minute), Reaper: r,
	})
	fmt.Fprintln(os.Stderr, "Run returned:", err)
	return 1
}
