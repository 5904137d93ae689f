// Command automator is the central server of executeOnProxy: it queues
// sealed commands per account and hands each to exactly one proxy instance.
package main

import (
	"context"
	"os"

	"github.com/opsgate/opsgate/automator/cli"
	"github.com/opsgate/opsgate/internal/stopsignal"
)

func main() {
	ctx, stop := stopsignal.NotifyContext(context.Background())
	// The first signal asks the command to end (serve stops gracefully,
	// exec cancels its unit); a second one ends the process at once, as
	// the signal's default does, whatever the command still waits for
	// (SIGHUP excepted: a closed terminal sends more than one).
	go func() { <-ctx.Done(); stopsignal.Stopping(stop) }()
	code := cli.Main(ctx, os.Args[1:], cli.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}
