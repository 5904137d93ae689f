// Command proxy is the agent installed inside customer networks: it
// long-polls the automator over outbound gRPC, runs claimed commands from
// its scripts directory and posts sealed results back.
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/opsgate/opsgate/internal/stopsignal"
	"github.com/opsgate/opsgate/proxy/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), stopsignal.List()...)
	code := cli.Main(ctx, os.Args[1:], cli.Env{Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}
