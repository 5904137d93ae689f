// Command goclient is executeOnProxy from Go with the automator's client
// package (docs/api.md):
//
//	go build -o goclient ./docs/examples/goclient
//	AUTOMATOR_GRPC=https://automator.example:8443 AUTOMATOR_CA=ca.pem \
//	AUTOMATOR_API_KEY=$(cat admin.apikey) ./goclient hello.sh world
//
// Built, not with `go run`, which exits 1 whatever the exit code the
// program returns.
//
// AUTOMATOR_GRPC may list several automators, comma-separated: a call that
// finds one unavailable moves on to the next.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/opsgate/opsgate/automator/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes SCRIPT [ARG...] on a proxy of $ACCOUNT (default acme) and
// returns the exit code `automator exec` would.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: goclient SCRIPT [ARG...]")
		return 255
	}
	account := getenv("ACCOUNT")
	if account == "" {
		account = "acme"
	}
	c, err := client.New(client.Config{
		Addresses: strings.Split(getenv("AUTOMATOR_GRPC"), ","),
		APIKey:    getenv("AUTOMATOR_API_KEY"),
		CAFile:    getenv("AUTOMATOR_CA"),
	})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 255
	}
	defer c.Close()

	// ExecuteOnProxy submits with an idempotency key and waits by work id,
	// so a dropped connection never runs the script twice. Ctrl-C (ctx)
	// cancels the unit.
	res, err := c.ExecuteOnProxy(ctx, account, client.Command{Script: args[0], Args: args[1:]},
		client.WithTimeout(5*time.Minute))
	var we *client.WorkError
	switch {
	case errors.Is(err, client.ErrTimeout):
		fmt.Fprintln(stderr, err) // "work w_… timed out: …"
		return 124
	case errors.Is(err, client.ErrFailed):
		fmt.Fprintln(stderr, err)
		return 125
	case errors.As(err, &we) && we.State == client.StateCancelled:
		fmt.Fprintln(stderr, err)
		return 126
	case errors.Is(err, client.ErrQueueFull): // the account's queue is full: nothing was queued
		// Without a deadline on ctx the client does not wait for room
		// itself; with one, it submits again after the delay until then.
		delay, _ := client.RetryDelay(err)
		fmt.Fprintf(stderr, "%v; nothing was queued: run it again in %v or later\n", err, delay)
		return 255
	case err != nil: // the call itself: auth, unknown account, no automator reachable
		fmt.Fprintln(stderr, err)
		return 255
	}
	stdout.Write(res.Stdout)
	stderr.Write(res.Stderr)
	fmt.Fprintf(stderr, "(work %s ran on instance %s, exit code %d)\n", res.WorkID, res.InstanceID, res.ExitCode)
	if res.ExitCode < 0 || res.ExitCode > 255 {
		// No exit status here can carry it (a Windows proxy's 259, say).
		fmt.Fprintf(stderr, "exit code %d is outside 0-255\n", res.ExitCode)
		return 255
	}
	return res.ExitCode
}
