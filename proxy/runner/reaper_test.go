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

// proxyChildUnregisteredEnv, set, holds runAsProxy between the script's
// start and its registration with the reaper, until it is killed.
const proxyChildUnregisteredEnv = "RUNNER_TEST_PROXY_CHILD_UNREGISTERED"

// The instance and unit of runAsProxy's script, which its reaper names;
// the unit of one held before its registration is another, as units are:
// the reaper finds such a script by its unit's id.
const (
	childInstance         = "proxy-child"
	childWorkID           = "w_0123456789abcdef0123456789abcdef"
	childUnregisteredWork = "w_fedcba9876543210fedcba9876543210"
)

// runAsProxy runs the script s.sh of dir (with dir as its argument) through
// Run with a reaper logging JSON, as the proxy does, and waits to be
// killed.
func runAsProxy(dir string) int {
	work := childWorkID
	if os.Getenv(proxyChildUnregisteredEnv) != "" {
		work = childUnregisteredWork
		beforeRegister = func() { time.Sleep(time.Hour) }
	}
	r := NewReaper(func(err error) { fmt.Fprintln(os.Stderr, "reaper:", err) }, ReaperLog{JSON: true, InstanceID: childInstance})
	_, err := Run(context.Background(), Spec{
		ScriptsDir: dir, Script: "s.sh", Args: []string{dir},
		Env:      map[string]string{WorkIDVar: work}, // as the agent sets it
		Deadline: time.Now().Add(10 * time.Minute), Reaper: r, WorkID: work,
	})
	fmt.Fprintln(os.Stderr, "Run returned:", err)
	return 1
}
