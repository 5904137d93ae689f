// Command proxy is the agent installed inside customer networks: it
// long-polls the automator over outbound gRPC, runs claimed commands from
// its scripts directory and posts sealed results back.
package main

import (
	"context"
	"os"

	"github.com/opsgate/opsgate/internal/pid1"
	"github.com/opsgate/opsgate/internal/stopsignal"
	"github.com/opsgate/opsgate/proxy/cli"
	"github.com/opsgate/opsgate/proxy/runner"
)

func main() {
	// First of all: this binary, run again by a proxy with ReaperEnv set,
	// is the reaper of that proxy's scripts, not a proxy.
	if os.Getenv(runner.ReaperEnv) == "1" {
		os.Exit(runner.ServeReaper(os.Stdin, os.Stderr))
	}
	// A descriptor this process inherited (from a shell or a supervisor
	// that leaks them) is not passed on to scripts (a review).
	runner.KeepInheritedFromScripts()
	// Nor is a SIGHUP this process was started ignoring (nohup): it
	// goes on ignoring it, its scripts get the default.
	stopsignal.ChildrenGetDefaultHUP()
	// A container's first process, with no init before it: this one
	// reaps the namespace's orphans (its scripts leave some) and passes
	// signals to the proxy, which runs as its child.
	if code, ok := pid1.Run(); ok {
		os.Exit(code)
	}
	ctx, stop := stopsignal.NotifyContext(context.Background())
	code := cli.Main(ctx, os.Args[1:], cli.Env{Stdout: os.Stdout, Stderr: os.Stderr, Reaper: true})
	stop()
	os.Exit(code)
}
