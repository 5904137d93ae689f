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

// The instance and unit of runAsProxy's script, which its reaper names.
const (
	childInstance = "proxy-child"
	childWorkID   = "w_0123456789abcdef0123456789abcdef"
)

// runAsProxy runs the script s.sh of dir (with dir as its argument) through
// Run with a reaper logging JSON, as the proxy does, and waits to be
// killed.
func runAsProxy(dir string) int {
	r := NewReaper(func(err error) { fmt.Fprintln(os.Stderr, "reaper:", err) }, ReaperLog{JSON: true, InstanceID: childInstance})
	_, err := Run(context.Background(), Spec{
		ScriptsDir: dir, Script: "s.sh", Args: []string{dir},
		Deadline: time.Now().Add(10 * time.Minute), Reaper: r, WorkID: childWorkID,
	})
	fmt.Fprintln(os.Stderr, "Run returned:", err)
	return 1
}
