// Package cli is the automator's command line: init, serve, account create,
// list, rotate and delete, apikey, audit, cert renew, exec, the listings
// (instances, work, replicas), work wait and cancel, backup, restore and
// repair, and the service commands (install, start, stop, status,
// uninstall). The binary's main only calls Main.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/clihelp"
	"github.com/opsgate/opsgate/proxy/service"
	"github.com/opsgate/opsgate/version"
)

const usage = `usage:
  automator init    --data-dir DIR [--public-url https://HOST:PORT] [--db DSN]
  automator serve   --data-dir DIR [--listen ADDR] [--http-listen ADDR] [--db DSN] [--replica-id ID] [--log-format text|json] [--insecure-plaintext]
  automator account create NAME --data-dir DIR [--db DSN]
  automator account list --data-dir DIR [--db DSN] [--json]
  automator account rotate-token NAME --data-dir DIR [--db DSN] [--overlap DUR]   # prints the new profile
  automator account rotate-key NAME --data-dir DIR [--db DSN] [--overlap DUR]     # prints the new profile
  automator account delete NAME --data-dir DIR [--db DSN]                         # cancels its open units, destroys its token and key
  automator apikey create NAME --data-dir DIR [--db DSN] (--accounts A,B | --all-accounts)
  automator apikey list --data-dir DIR [--db DSN] [--json]
  automator apikey revoke ID --data-dir DIR [--db DSN]
  automator audit   --data-dir DIR [--db DSN] [--since DUR] [--account NAME] [--work ID] [--kind KIND,...] [--json]
  automator cert renew --data-dir DIR [--db DSN]
  automator instances --account NAME --data-dir DIR [--db DSN] [--json]
  automator work list --data-dir DIR [--db DSN] [--account NAME] [--state STATE] [--limit N] [--json]
  automator work show ID (--data-dir DIR [--db DSN] | --server URL --api-key-file F --ca FILE) [--reveal] [--json]
  automator work wait ID... (--data-dir DIR | --server URL --api-key-file F --ca FILE) [--json]
  automator work cancel ID... (--data-dir DIR | --server URL --api-key-file F --ca FILE) [--json]
  automator replicas --data-dir DIR [--db DSN]
  automator backup  --data-dir DIR [--db DSN] FILE               # SQLite: a consistent copy while serve runs
  automator restore --data-dir DIR [--db DSN] FILE               # serve stopped; ends the units open in FILE
  automator restore --data-dir DIR [--db DSN] --open-work-only   # after a PostgreSQL restore
  automator repair  --data-dir DIR [--db DSN] [--trust-rows] [--salvage]  # rebuilds a damaged database (SQLite: serve stopped)
  automator exec    --data-dir DIR --account NAME [--timeout DUR] [--stdin FILE|-] [--env NAME=VALUE]... [--idempotency-key KEY] SCRIPT [ARG...]
  automator exec    --server URL --api-key-file F --ca FILE --account NAME ... SCRIPT [ARG...]
  automator install --data-dir DIR [--db DSN] [--name NAME] [--user USER] [--manual-start]
  automator start|stop|status|uninstall [--name NAME]
  automator version                                              # this build's version (also --version)

--db DSN, wherever it is taken, overrides db in DIR/automator.yaml: give a command the --db
its serve was given, or it opens another database.

` + "`automator help COMMAND`" + ` (or ` + "`automator COMMAND --help`" + `) shows one command's forms and flags.

exit codes: 0 done; 255 the command failed (a flag, a file, the automator unreachable or
refusing the API key). exec: the remote exit code, 124 timed out, 125 the proxy could not run
it, or killed it when it was stopped (the reason says which), 126 cancelled. work wait: 1 when a unit did not succeed with exit code 0, or an ID was
malformed or refused (unknown, another account's; one line each): the other IDs are still
waited for. work cancel: 1 when an ID was malformed or refused (unknown, another account's;
one line each): the other IDs are still cancelled, and an ID whose unit had already ended
counts as done. With --json, work wait and work cancel list a refused ID in its place as
{"work_id": ID, "refused": why}, with no state; when they fail (255) they still print the
array of what they got to (the units ended or cancelled by then and the IDs refused), then
the error on stderr.
`

// Exit codes of exec (DESIGN.md); work wait and work cancel also exit 1
// (ExitNotAllSucceeded, ExitSomeIDRefused); other commands exit 0 or
// ExitError.
const (
	ExitTimeout   = 124
	ExitFailed    = 125
	ExitCancelled = 126
	ExitError     = 255
)

// Env is what a command may touch of the outside world.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// Main runs one command and returns the process exit code. Errors are
// printed once, as one line on stderr (serve's, with the JSON log format,
// as a JSON record).
func Main(ctx context.Context, args []string, env Env) int {
	code, err := run(ctx, args, env)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // the command's flag set printed its help
		}
		msg := clihelp.OneLineStopped(ctx, err)
		if store.IsDamaged(err) && len(args) > 0 && args[0] != "repair" && !strings.Contains(msg, "restore") {
			msg += " (the database is damaged: `automator repair` rebuilds it, with SQLite once serve is stopped, or says what to do; see docs/backup.md)"
		}
		if store.IsLocked(err) {
			// A write waited 5 s for another program's lock (a re-review:
			// it said only SQLITE_BUSY).
			msg += " (another program holds the database locked: a sqlite3 shell or a script in a transaction on the file; run this again once it lets go; `automator backup` is the way to copy the database while serve runs)"
		}
		fmt.Fprintf(env.Stderr, "automator: %s\n", msg)
		return ExitError
	}
	return code
}

func run(ctx context.Context, args []string, env Env) (int, error) {
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, usage)
		return 0, errors.New("no command given")
	}
	if name, rest, ok, err := service.SplitServiceFlag(args); ok || err != nil {
		if err != nil {
			return 0, err
		}
		return runService(ctx, name, rest, env)
	}
	if len(args) >= 2 && isGroup(args[0]) && slices.Contains([]string{"-h", "--help", "help"}, args[1]) {
		// `automator account --help`: the group's forms, as `exec --help`
		// shows exec's.
		fmt.Fprintln(env.Stdout, "usage:")
		for _, f := range clihelp.Forms(usage, "automator", args[0]) {
			fmt.Fprintln(env.Stdout, f)
		}
		fmt.Fprintln(env.Stdout, "\n`automator help` lists every command; `automator "+args[0]+" COMMAND --help` shows its flags.")
		return 0, nil
	}
	switch args[0] {
	case "init":
		return 0, cmdInit(ctx, args[1:], env)
	case "serve":
		err := cmdServe(ctx, args[1:], env)
		if err != nil && !errors.Is(err, flag.ErrHelp) && serveLogFormat(args[1:]) == "json" {
			// Its last log line, in the format of the others.
			newLogger(env.Stderr, "json").Error("serve ended", "err", err)
			return ExitError, nil
		}
		return 0, err
	case "account":
		switch {
		case len(args) >= 2 && args[1] == "create":
			return 0, cmdAccountCreate(ctx, args[2:], env)
		case len(args) >= 2 && args[1] == "list":
			return 0, cmdAccountList(ctx, args[2:], env)
		case len(args) >= 2 && args[1] == "rotate-token":
			return 0, cmdAccountRotate(ctx, false, args[2:], env)
		case len(args) >= 2 && args[1] == "rotate-key":
			return 0, cmdAccountRotate(ctx, true, args[2:], env)
		case len(args) >= 2 && args[1] == "delete":
			return 0, cmdAccountDelete(ctx, args[2:], env)
		}
		return 0, errors.New("usage: automator account create|list|rotate-token|rotate-key|delete ... (see `automator help`)")
	case "instances":
		return 0, cmdInstances(ctx, args[1:], env)
	case "work":
		return cmdWork(ctx, args[1:], env)
	case "exec":
		return cmdExec(ctx, args[1:], env)
	case "apikey":
		return 0, cmdAPIKey(ctx, args[1:], env)
	case "audit":
		return 0, cmdAudit(ctx, args[1:], env)
	case "cert":
		if len(args) < 2 || args[1] != "renew" {
			return 0, errors.New("usage: automator cert renew --data-dir DIR")
		}
		return 0, cmdCertRenew(ctx, args[2:], env)
	case "replicas":
		return 0, cmdReplicas(ctx, args[1:], env)
	case "backup":
		return 0, cmdBackup(ctx, args[1:], env)
	case "restore":
		return 0, cmdRestore(ctx, args[1:], env)
	case "repair":
		return 0, cmdRepair(ctx, args[1:], env)
	case "install", "start", "stop", "status", "uninstall":
		return 0, serviceCommand(args[0], args[1:], env)
	case "version", "--version":
		if len(args) > 1 && slices.Contains([]string{"-h", "--help", "help"}, args[1]) {
			fmt.Fprintln(env.Stdout, "usage:\n"+strings.Join(clihelp.Forms(usage, "automator", "version"), "\n"))
			return 0, nil
		}
		if len(args) > 1 {
			return 0, fmt.Errorf("%s takes no arguments", args[0])
		}
		fmt.Fprintln(env.Stdout, version.Line("automator"))
		return 0, nil
	case "help", "-h", "--help":
		if len(args) > 1 && args[0] == "help" {
			// `automator help exec` is `automator exec --help`, and
			// `automator help account create` `automator account create --help`.
			return run(ctx, append(slices.Clone(args[1:]), "--help"), env)
		}
		fmt.Fprint(env.Stdout, usage)
		return 0, nil
	}
	return 0, fmt.Errorf("unknown command %q; run `automator help`", args[0])
}

// newFlags makes a flag set that reports errors as values, not by exiting.
func newFlags(name string, env Env) *flag.FlagSet {
	fs := flag.NewFlagSet("automator "+name, flag.ContinueOnError)
	fs.Usage = clihelp.Usage(env.Stdout, usage, "automator", name, fs) // quiet on a parse error: Main prints the one-line reason
	return fs
}

// oneArg is the one argument of a command that takes one (what: "NAME",
// "ID", "FILE") out of its positional arguments pos: none is refused with
// usage, more than one named, with usage.
func oneArg(fs *flag.FlagSet, what string, pos []string, usage string) (string, error) {
	switch len(pos) {
	case 1:
		return pos[0], nil
	case 0:
		return "", errors.New(usage)
	}
	return "", fmt.Errorf("%s takes one %s, got %q; %s", strings.TrimPrefix(fs.Name(), "automator "), what, pos, usage)
}

func requireFlag(name, v string) error {
	if strings.TrimSpace(v) == "" {
		return fmt.Errorf("--%s is required", name)
	}
	return nil
}

// isGroup says whether name is a group of commands (`account create`,
// `work list`, ...) rather than a command.
func isGroup(name string) bool {
	return slices.Contains([]string{"account", "apikey", "cert", "work"}, name)
}
