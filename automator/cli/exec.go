package cli

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/internal/clihelp"
	"github.com/opsgate/opsgate/internal/hostport"
	"github.com/opsgate/opsgate/internal/secretfile"
	"github.com/opsgate/opsgate/internal/stopsignal"
)

// maxStdin is what exec reads from --stdin at most: the most any
// automator accepts (limits.max_stdin at its highest); more is refused
// before anything is queued. Within it, the automator's own limit
// applies (1 MiB unless automator.yaml raises it), and a command past
// that is refused with a message naming limits.max_stdin.
const maxStdin = config.MaxStdinLimit

// truncatedStreams names the remote streams the proxy cut at its output
// limit, as the subject of "cut": "" when none was.
func truncatedStreams(stdout, stderr bool) string {
	switch {
	case stdout && stderr:
		return "its stdout and stderr were"
	case stdout:
		return "its stdout was"
	case stderr:
		return "its stderr was"
	}
	return ""
}

// cutLine says that the streams cut (truncatedStreams) of res were cut at
// the proxy's output limit, and how much of them is kept.
func cutLine(res client.Result, cut string) string {
	kept := len(res.Stdout)
	if res.StderrTruncated && (!res.StdoutTruncated || len(res.Stderr) > kept) {
		kept = len(res.Stderr)
	}
	return fmt.Sprintf("work %s: %s cut at the proxy's output limit (its max_output_bytes): the first %d bytes are kept, the rest was dropped", res.WorkID, cut, kept)
}

// cmdExec is executeOnProxy from the shell, through the Go client: it
// submits once (a retried submit carries the same idempotency key), then
// waits by work id, resuming on a new connection if the automator restarts,
// so a unit is never submitted twice. Ctrl-C cancels the unit.
func cmdExec(ctx context.Context, args []string, env Env) (int, error) {
	fs := newFlags("exec", env)
	caller := addCallerFlags(fs)
	account := fs.String("account", "", "account whose proxies run the command")
	timeout := clihelp.Duration(fs, "timeout", 0, "time from queueing to the deadline (default: the server's, 5m)")
	stdinFrom := fs.String("stdin", "", "file to send as the script's stdin, or - for this process's stdin")
	env1 := envFlag{}
	fs.Var(env1, "env", "a variable for the script (repeat it for more), which a proxy sets only when its allowed_env lists it; those that would make a shell or a program run code of the caller's are refused, as by the API (docs/api.md)")
	key := fs.String("idempotency-key", "", "the unit's idempotency key: exec run again with it, within the keys' retention window (24h by default), returns the first run's unit and outcome instead of running the script again")
	if err := clihelp.Parse(fs, args); err != nil {
		return 0, err
	}
	if fs.NArg() == 0 {
		return 0, errors.New("exec: SCRIPT is required")
	}
	if err := requireFlag("account", *account); err != nil {
		if script := fs.Arg(0); slices.ContainsFunc(fs.Args()[1:], func(a string) bool {
			name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-") // -account is --account to the flag package
			return name != a && (name == "account" || strings.HasPrefix(name, "account="))
		}) {
			// Everything after SCRIPT is the script's (a review).
			return 0, fmt.Errorf("%w: the --account after %s is one of the script's arguments, as is everything after SCRIPT; give exec's flags before it", err, script)
		}
		return 0, err
	}
	timeoutSet, stdinSet, keySet := false, false, false
	fs.Visit(func(f *flag.Flag) {
		timeoutSet = timeoutSet || f.Name == "timeout"
		stdinSet = stdinSet || f.Name == "stdin"
		keySet = keySet || f.Name == "idempotency-key"
	})
	if keySet && *key == "" {
		// A script's variable left empty: not taken for a fresh key.
		return 0, errors.New("--idempotency-key is empty; give one, or leave it out for a fresh key per run")
	}
	if stdinSet && *stdinFrom == "" {
		// A script's variable left empty: not taken for no stdin.
		return 0, errors.New("--stdin is empty; give a FILE, or - for this process's stdin (leave it out for none)")
	}
	if *timeout < 0 || (timeoutSet && *timeout == 0) {
		// 0 is the flag's unset value (the server's default), not a
		// deadline a caller can ask for.
		return 0, fmt.Errorf("--timeout %v must be positive (leave it out for the server's default)", *timeout)
	}
	stdin, err := readStdin(ctx, *stdinFrom, env.Stdin)
	if err != nil {
		return 0, err
	}
	c, err := caller.connect(env.Stderr)
	if err != nil {
		return 0, err
	}
	defer c.Close()

	// Once the unit is queued, an interrupt cancels it, which may take a
	// while (an automator slow to answer): a second one leaves it as it
	// is, and says how to follow it.
	left := &leaving{out: env.Stderr, account: *account, caller: caller}
	opts := []client.Option{client.WithStdin(stdin), client.WithOnQueued(left.queued)}
	defer stopsignal.SetLastWords(nil)
	stopNotice := context.AfterFunc(ctx, left.interrupted)
	if *timeout > 0 {
		opts = append(opts, client.WithTimeout(*timeout))
	}
	if len(env1) > 0 {
		opts = append(opts, client.WithEnv(env1))
	}
	if *key != "" {
		opts = append(opts, client.WithIdempotencyKey(*key))
	}
	res, err := c.ExecuteOnProxy(ctx, *account, client.Command{Script: fs.Arg(0), Args: fs.Args()[1:]}, opts...)
	stopNotice()
	left.finished()
	code, rerr := report(ctx, res, err, env)
	switch {
	case rerr != nil && mayStillRun(res, err):
		rerr = stillQueued(res.WorkID, res.LocalDeadline, rerr, caller)
	case rerr != nil && res.WorkID == "" && status.Code(err) == codes.NotFound && *caller.dir != "":
		// The account is unknown. Away from the automator's host
		// (--server) no command lists the accounts.
		rerr = fmt.Errorf("%w; `automator account list --data-dir %s`%s lists them", rerr, shellArg(*caller.dir), serveDBHint(*caller.dir))
	}
	return code, caller.explain(rerr)
}

// whenToRetry adds to a refusal that waiting mends (RetryInfo) when to try
// again: exec does not wait for room in a full queue itself (it has no
// deadline to bound the wait; the Go client waits within a context's), so
// a script that wants to runs it again then. The failed-authentication
// budget's message (any command's) says when already.
func whenToRetry(err error) error {
	d, ok := client.RetryDelay(err)
	switch {
	case !ok:
		return err
	case errors.Is(err, client.ErrQueueFull):
		return fmt.Errorf("%w; nothing was queued: run it again in %v or later", err, d)
	case !strings.Contains(err.Error(), d.String()):
		return fmt.Errorf("%w; try again in %v", err, d)
	}
	return err
}

// envFlag is exec's --env: NAME=VALUE, repeated. A name given twice is
// refused: which value the script was to see would be a guess.
type envFlag map[string]string

func (e envFlag) String() string { return "" }

func (e envFlag) Kind() string { return "NAME=VALUE" }

func (e envFlag) Set(s string) error {
	name, value, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return errors.New("want NAME=VALUE")
	}
	if _, twice := e[name]; twice {
		return fmt.Errorf("%s is given twice", name)
	}
	e[name] = value
	return nil
}

// cancelNotice is how long exec, interrupted, may wait for the answer to
// its submit or for the cancel of its unit before it says what it waits
// for (leaving).
const cancelNotice = time.Second

// leaving is what exec, interrupted, says of the unit it leaves: when the
// answer to its submit (which may have queued a unit) or the cancel of its
// unit takes cancelNotice or more, that it waits for it, and what a second
// interrupt does (most are answered at once, and say nothing more than
// the unit's end); and, as the last words of a second interrupt
// (stopsignal.SetLastWords), which unit it leaves and how to follow it.
type leaving struct {
	out     io.Writer
	account string
	caller  callerFlags

	mu         sync.Mutex
	id         string
	deadline   time.Time
	interrupt  bool
	timer      *time.Timer
	saidSubmit bool
	saidCancel bool
	done       bool
}

// queued notes the unit exec waits for (client.WithOnQueued). Once
// interrupted, its cancel begins now.
func (l *leaving) queued(id string, deadline time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.id, l.deadline = id, deadline
	stopsignal.SetLastWords(func() {
		fmt.Fprintf(l.out, "automator: %s\n", clihelp.OneLine(stillQueued(id, deadline, errors.New("interrupted again: stopped waiting for its cancel"), l.caller)))
	})
	if l.interrupt {
		l.armLocked()
	}
}

// interrupted notes that exec was interrupted: it waits for its submit's
// answer, to cancel the unit it names, or cancels its unit.
func (l *leaving) interrupted() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.interrupt = true
	if l.id == "" {
		where := ""
		if *l.caller.dir != "" {
			where = fmt.Sprintf(" (`automator work list --account %s --data-dir %s` lists the account's units)", shellArg(l.account), shellArg(*l.caller.dir))
		}
		stopsignal.SetLastWords(func() {
			fmt.Fprintf(l.out, "automator: interrupted again before the automator answered the submit: it may have queued the unit, which may then run%s\n", where)
		})
	}
	l.armLocked()
}

// armLocked says, cancelNotice from now, what exec waits for, unless it is
// done by then.
func (l *leaving) armLocked() {
	if l.done {
		return
	}
	if l.timer != nil {
		l.timer.Stop()
	}
	l.timer = time.AfterFunc(cancelNotice, l.notice)
}

func (l *leaving) notice() {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.done:
	case l.id == "" && !l.saidSubmit:
		l.saidSubmit = true
		// The client awaits a submit's answer within its try's bound,
		// 10 s, once interrupted.
		fmt.Fprintf(l.out, "automator: interrupted: waiting for the automator's answer to the submit (10s at most), to cancel the unit it may have queued; interrupt again to stop waiting\n")
	case l.id != "" && !l.saidCancel:
		l.saidCancel = true
		until := ""
		if !l.deadline.IsZero() {
			until = " until its deadline at " + l.deadline.Format(time.TimeOnly)
		}
		fmt.Fprintf(l.out, "automator: interrupted: cancelling work %s, which is taking a while; interrupt again to stop waiting and leave it to run%s\n", l.id, until)
	}
}

// finished tells that exec's wait, or its cancel, is over: nothing more is
// said, nor as the last words of a second interrupt, which no longer
// leaves a unit (exec says what became of it; a review: a second Ctrl-C
// while exec wrote an ended unit's output said it might still run).
func (l *leaving) finished() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.done = true
	if l.timer != nil {
		l.timer.Stop()
	}
	stopsignal.SetLastWords(nil)
}

// mayStillRun reports whether ExecuteOnProxy's err leaves its unit queued
// or claimed as far as exec knows: the unit was stored (res names it), and
// then the wait, or the cancel of an interrupt, failed (the API key
// refused since, no automator answering, a narrowed key told the unit is
// not found), so its outcome was not learnt. A unit that ended (a
// *WorkError, or a result unreadable since its account was deleted) is
// not.
func mayStillRun(res client.Result, err error) bool {
	var we *client.WorkError
	if err == nil || res.WorkID == "" || errors.As(err, &we) || errors.Is(err, client.ErrOutcomeUnknown) {
		return false
	}
	_, ended := client.UnreadableWork(err)
	return !ended
}

// stillQueued adds to err, which ended exec after unit id was queued, that
// the unit may still run, and how to follow it: work wait and work cancel
// take its id, with an API key the automator accepts when this one was
// refused. The commands carry the flags of caller, which reached the
// automator, so that they run as printed. Past the unit's deadline (the
// wait gives up on automators that do not answer a minute after it) the
// unit has ended, or ends as soon as an automator serves: exec says so,
// and how to learn how it ended.
//
// A NotFound for the unit with the data directory's admin key (no
// --api-key-file), which init makes for every account, is not a key that
// may not see the unit (a scoped key that lost its account to a deletion
// since): that key stored it and sees every account, deleted ones'
// units as unreadable. The unit, acknowledged as queued, is gone from the
// database: a commit lost after it was acknowledged (docs/several-
// automators.md), so no proxy claims it any more and no wait would end.
func stillQueued(id string, deadline time.Time, err error, caller callerFlags) error {
	if status.Code(err) == codes.NotFound && *caller.dir != "" && *caller.apiKeyFile == "" {
		// A restore of a backup taken before it was queued loses it too
		// (a review: the rollback of an upgrade was told as a failover).
		after := ""
		if !deadline.IsZero() && time.Now().Before(deadline) {
			after = fmt.Sprintf(", once its deadline at %s has passed if the script must not run twice", deadline.Format(time.TimeOnly))
		}
		return fmt.Errorf("%w; work %s was queued, but the database has lost it since (the data directory's admin key sees every account): the database was restored from a backup taken before (docs/backup.md), or a commit was undone after it was acknowledged, by a PostgreSQL failover to an asynchronous standby or a crash with synchronous_commit off (docs/several-automators.md); no proxy will claim it from now on, but one that claimed it before may still be running it: run exec again if it has to run%s", err, id, after)
	}
	with := ""
	switch status.Code(err) {
	case codes.Unauthenticated:
		with = ", with an API key the automator accepts"
	case codes.PermissionDenied, codes.NotFound:
		with = ", with an API key that may use its account"
	}
	target := caller.target()
	if !deadline.IsZero() && !time.Now().Before(deadline) && *caller.dir != "" && *caller.server == "" {
		// work show with --data-dir reads the database itself: work wait
		// would ask the automator that did not answer (a review: it
		// spent another minute so, on a hung replica).
		return fmt.Errorf("%w; work %s was queued, and its deadline passed at %s: it has ended, or ends as soon as an automator serves (none hands it out or takes its result after its deadline, and a proxy stops its script then); learn how, and what it printed, with `automator work show %s %s --reveal`, which reads the database itself, whether an automator answers or not", err, id, deadline.Format(time.TimeOnly), id, target)
	}
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		return fmt.Errorf("%w; work %s was queued, and its deadline passed at %s: it has ended, or ends as soon as an automator serves (none hands it out or takes its result after its deadline, and a proxy stops its script then); learn how with `automator work wait %s %s`%s, and what it printed with `automator work show %s %s --reveal`", err, id, deadline.Format(time.TimeOnly), id, target, with, id, target)
	}
	until := ""
	if !deadline.IsZero() {
		until = fmt.Sprintf(" until its deadline at %s", deadline.Format(time.TimeOnly))
	}
	return fmt.Errorf("%w; work %s was queued and may still run%s: follow it with `automator work wait %s %s`, or end it with `automator work cancel %s %s`%s; once it has ended, `automator work show %s %s --reveal` gives what it printed", err, id, until, id, target, id, target, with, id, target)
}

// report writes the outcome and returns the exit code DESIGN.md names.
func report(ctx context.Context, res client.Result, err error, env Env) (int, error) {
	var we *client.WorkError
	switch {
	case err == nil:
		// Output that could not be written (a full disk, a closed
		// descriptor) is lost: the remote exit code would report a
		// success that did not reach its reader.
		// A stream the script left empty is not written: a write of
		// nothing to a full disk fails all the same (/dev/full).
		var outErr, errErr error
		if len(res.Stdout) > 0 {
			_, outErr = env.Stdout.Write(res.Stdout)
		}
		if len(res.Stderr) > 0 {
			_, errErr = env.Stderr.Write(res.Stderr)
		}
		if outErr != nil {
			return 0, fmt.Errorf("work %s exited with %d, but writing its stdout failed: %w", res.WorkID, res.ExitCode, outErr)
		}
		if errErr != nil {
			return 0, fmt.Errorf("work %s exited with %d, but writing its stderr failed: %w", res.WorkID, res.ExitCode, errErr)
		}
		// exec's own lines begin a line of their own, after a remote
		// stderr that does not end one.
		ownLine := "automator: "
		if n := len(res.Stderr); n > 0 && res.Stderr[n-1] != '\n' {
			ownLine = "\n" + ownLine
		}
		if cut := truncatedStreams(res.StdoutTruncated, res.StderrTruncated); cut != "" {
			fmt.Fprintf(env.Stderr, "%s%s\n", ownLine, cutLine(res, cut))
			ownLine = "automator: "
		}
		if res.ExitCode < 0 || res.ExitCode > 255 {
			fmt.Fprintf(env.Stderr, "%swork %s exited with %d, outside 0-255\n", ownLine, res.WorkID, res.ExitCode)
			return ExitError, nil
		}
		return res.ExitCode, nil
	case errors.Is(err, client.ErrCancelled) && ctx.Err() != nil && errors.As(err, &we):
		fmt.Fprintf(env.Stderr, "automator: work %s cancelled (interrupted)\n", we.WorkID)
		return ExitCancelled, nil
	case errors.As(err, &we):
		// What a script killed before it ended (its proxy stopped) wrote
		// until then: how far it got. Best effort: the unit failed anyway.
		if len(res.Stdout) > 0 {
			_, _ = env.Stdout.Write(res.Stdout)
		}
		ownLine := "automator: "
		if n := len(res.Stderr); n > 0 {
			_, _ = env.Stderr.Write(res.Stderr)
			if res.Stderr[n-1] != '\n' {
				ownLine = "\n" + ownLine
			}
		}
		if cut := truncatedStreams(res.StdoutTruncated, res.StderrTruncated); cut != "" {
			fmt.Fprintf(env.Stderr, "%s%s\n", ownLine, cutLine(res, cut))
			ownLine = "automator: "
		}
		fmt.Fprintf(env.Stderr, "%s%v\n", ownLine, we)
		switch we.State {
		case client.StateTimedOut:
			return ExitTimeout, nil
		case client.StateFailed:
			return ExitFailed, nil
		case client.StateCancelled:
			return ExitCancelled, nil
		}
		return ExitError, nil
	}
	return 0, err
}

// readStdin reads --stdin. It returns when ctx ends (Ctrl-C: main
// catches SIGINT, so nothing else would end a read from a terminal or an
// unfinished producer); the read itself then goes on in the background
// until its input ends or the process exits.
func readStdin(ctx context.Context, from string, stdin io.Reader) ([]byte, error) {
	if from == "" {
		return nil, nil
	}
	type read struct {
		data []byte
		err  error
	}
	done := make(chan read, 1)
	go func() {
		r := stdin
		if from != "-" {
			// Opened here too: opening a FIFO waits for its writer.
			f, err := os.Open(from)
			if err != nil {
				done <- read{err: fmt.Errorf("--stdin: %w", err)}
				return
			}
			defer f.Close()
			r = f
		}
		data, err := io.ReadAll(io.LimitReader(r, maxStdin+1))
		if err != nil {
			err = fmt.Errorf("--stdin: reading: %w", err)
		}
		done <- read{data, err}
	}()
	var got read
	select {
	case got = <-done:
	case <-ctx.Done():
		return nil, fmt.Errorf("--stdin: interrupted while reading it; nothing was queued: %w", ctx.Err())
	}
	if got.err != nil {
		return nil, got.err
	}
	if len(got.data) > maxStdin {
		return nil, fmt.Errorf("--stdin: more than %d bytes, the most an automator accepts (limits.max_stdin at its highest)", maxStdin)
	}
	return got.data, nil
}

// callerFlags are the flags of a command that calls the automator as a
// caller (exec, work wait, work cancel).
type callerFlags struct{ dir, server, apiKeyFile, caFile *string }

func addCallerFlags(fs *flag.FlagSet) callerFlags {
	return callerFlags{
		dir:        fs.String("data-dir", "", "the automator's data directory (on the automator's host)"),
		server:     fs.String("server", "", "automator URL https://HOST:PORT (away from its host); several, comma-separated, fail over"),
		apiKeyFile: fs.String("api-key-file", "", "file holding the API key (with --server)"),
		caFile:     fs.String("ca", "", "the automator's CA certificate (with --server)"),
	}
}

// retrying says what a call doing what does at now while no automator
// answers: it tries again until until, and Ctrl-C stops it; or, its
// budget about spent (a cancel's, after an interrupt), once more ("for 0s
// more" said nothing).
func retrying(doing string, until, now time.Time) string {
	left := until.Sub(now).Round(time.Second)
	if left < time.Second {
		return doing + ": trying once more"
	}
	return fmt.Sprintf("%s: trying again for %v more (until %s), Ctrl-C stops", doing, left, until.Format(time.TimeOnly))
}

// target is the flags given that say how to reach the automator, for a
// command of the same flags (work wait, work cancel) printed to be run as
// it is.
func (f callerFlags) target() string {
	var words []string
	for _, fl := range []struct{ name, value string }{{"--data-dir", *f.dir}, {"--server", *f.server}, {"--api-key-file", *f.apiKeyFile}, {"--ca", *f.caFile}} {
		if fl.value != "" {
			words = append(words, fl.name, shellArg(fl.value))
		}
	}
	return strings.Join(words, " ")
}

// connect makes the client the flags say (clientConfig). When a call can
// connect to no automator (refused; or accepted, then closed unanswered,
// as by a load balancer without a backend, or answered by something that
// is not an automator; or refused by TLS), or the automators it connects
// to do not answer (hung: a stopped process, whose kernel still accepts
// connections; a call stuck in one that answers pings: hungWhy), or
// answer that their database does not (client.KindDatabaseUnreachable), it
// says so on stderr, in one line, as soon as the client knows (the
// connection's setup or its keepalive gave up, or a try's bound passed):
// where the address came from, why, what it does and until when it keeps
// trying (a serve restarting or resuming is reached meanwhile), rather
// than retrying silently for the retry budget's minute, or until a
// minute past the unit's deadline.
func (f callerFlags) connect(stderr io.Writer) (*client.Client, error) {
	cfg, fromNow, err := clientConfig(*f.dir, *f.server, *f.apiKeyFile, *f.caFile)
	if err != nil {
		return nil, err
	}
	several := len(cfg.Addresses) > 1
	cfg.OnUnreachable = func(u client.Unreachable) {
		from := fromNow()
		until := retrying(u.Doing, u.Until, time.Now())
		if u.Hung {
			what := "the automator at " + u.Address
			if from != "" {
				what += from + ","
			}
			if several {
				what = "none of the automators --server names (the last tried, " + u.Address + ")"
			}
			fmt.Fprintf(stderr, "automator: %s is not answering: %v (%s); %s\n", what, u.Err, hungWhy(u.Kind), until)
			return
		}
		if u.Kind == client.KindDatabaseUnreachable {
			// It answered: where its address came from, and whether
			// serve runs, are beside the point.
			what := "the automator at " + u.Address + " cannot"
			if several {
				what = "none of the automators --server names (the last tried, " + u.Address + ") can"
			}
			fmt.Fprintf(stderr, "automator: %s serve the call now: %v; %s\n", what, u.Err, until)
			return
		}
		what := "the automator at " + u.Address
		if several {
			what = "any automator --server names (the last tried, " + u.Address + ")"
		}
		fmt.Fprintf(stderr, "automator: cannot connect to %s%s: %v; %s\n", what, from, u.Err, until)
	}
	return client.New(cfg)
}

// hungWhy is what an automator that did not answer in the way kind says
// may have come to: only what the client saw leaves open.
func hungWhy(kind client.UnreachableKind) string {
	switch kind {
	case client.KindCallStuck:
		// It answered pings, or the probe of its connection: its process
		// runs and its packets pass.
		return "it is there, the call is stuck in it: waiting on its database?"
	case client.KindCallUnanswered:
		// Nothing came within the try's bound, nor in answer to the probe
		// of its connection.
		return "nothing else came over its connection either: its process stopped or frozen, its packets dropped, or the call stuck in it"
	}
	// Its pings unanswered: a stuck call would not silence them.
	return "its process stopped or frozen, or its packets dropped"
}

// explain adds to an automator's refusal of the API key (Unauthenticated)
// what to do when the key is the data directory's admin.apikey, which
// --data-dir uses unless --api-key-file names another: init made it, and
// `apikey revoke admin` may have revoked it since. A new key is made on the
// automator's host without any API key (apikey create opens the store);
// written over the file, it keeps the file's mode (0600). To a refusal that
// waiting mends it adds when to try again (whenToRetry).
func (f callerFlags) explain(err error) error {
	err = whenToRetry(err)
	if status.Code(err) != codes.Unauthenticated {
		return err
	}
	if *f.apiKeyFile != "" && status.Convert(err).Message() == "invalid API key" {
		// Not a revoked key, which its message names: one the
		// automator does not know.
		return fmt.Errorf("%w; that is the key in %s (--api-key-file): the automator knows no such key (another automator's? mistyped? `automator apikey list` on the automator's host lists its keys, `apikey create` makes one)", err, *f.apiKeyFile)
	}
	if *f.dir == "" || *f.apiKeyFile != "" {
		return err
	}
	path := filepath.Join(*f.dir, config.FileAPIKey)
	return fmt.Errorf("%w; that is the key in %s: put a new one there with `automator apikey create admin --all-accounts --data-dir %s > %s`%s (run on this host, it needs no API key), or give --api-key-file", err, path, *f.dir, path, serveDBHint(*f.dir))
}

// readAPIKeyFile reads the API key in the file at path, written by hand or
// by a shell's redirection of `apikey create` (secretfile.Text: a
// byte-order mark, UTF-16 and CRLF are fine). The key is one word of
// printable ASCII: anything else gets an error naming the file, rather
// than a refusal by the automator or the gRPC library.
func readAPIKeyFile(path string) (string, error) {
	key, err := secretfile.Read(path)
	var pathErr *fs.PathError
	switch {
	case errors.As(err, &pathErr):
		return "", fmt.Errorf("reading API key: %w", err)
	case err != nil:
		return "", fmt.Errorf("API key file %s is %w", path, err)
	case key == "":
		return "", fmt.Errorf("API key file %s is empty", path)
	}
	for _, c := range []byte(key) {
		if c <= ' ' || c > '~' {
			return "", fmt.Errorf("API key file %s holds something other than one API key (a space, a line break or a character that is not printable ASCII): it holds one line, as `automator apikey create` prints it", path)
		}
	}
	return key, nil
}

// maxCAFile bounds the file --ca names: the automator's ca.pem is under
// 1 KiB, a bundle of many CAs well under 1 MiB.
const maxCAFile = 1 << 20

// clientConfig says how to reach the automator as a caller, either on its
// own host (--data-dir: address, CA and admin key from the data directory)
// or from afar (--server, --ca, --api-key-file).
// from says, when called, where the address of a --data-dir came from, and
// how to check that a serve runs there: ", the address in
// DIR/serving.yaml, ...", or ", listen in DIR/automator.yaml ..." ("" for
// --server); it looks at serving.yaml again, which a serve that stopped
// since has removed.
func clientConfig(dir, server, apiKeyFile, caFile string) (cfg client.Config, from func() string, err error) {
	from = func() string { return "" }
	switch {
	case dir != "" && server != "":
		return cfg, from, errors.New("give either --data-dir or --server, not both")
	case dir != "":
		c, err := config.Load(dir)
		if err != nil {
			return cfg, from, err
		}
		addr, plaintext := c.Listen, c.InsecurePlaintext
		serve := "`automator serve --data-dir " + shellArg(dir) + "`"
		listen := fmt.Sprintf(", listen in %s (check that %s runs)", filepath.Join(dir, config.FileConfig), serve)
		from = func() string { return listen }
		s, ok, err := config.ReadServing(dir)
		if err != nil {
			return cfg, from, err
		} else if ok {
			addr, plaintext = s.GRPC, s.Plaintext
			serving := filepath.Join(dir, config.FileServing)
			from = func() string {
				if _, ok, err := config.ReadServing(dir); err == nil && !ok {
					return fmt.Sprintf(", the address %s named as this command started, which serve has removed since, as it does when it stops (check that %s runs)", serving, serve)
				}
				return fmt.Sprintf(", the address in %s, which serve removes as it stops but leaves behind when killed (check that %s runs)", serving, serve)
			}
		}
		h, port, err := net.SplitHostPort(addr)
		if err != nil {
			return cfg, from, fmt.Errorf("gRPC address %q: %w", addr, err)
		}
		if !ok && port == "0" {
			return cfg, from, fmt.Errorf("no automator serves from %s: listen has port 0, and serve writes the port it bound to %s while it runs; start `automator serve --data-dir %s`", dir, config.FileServing, dir)
		}
		if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
			h = "127.0.0.1"
		} else if h != "127.0.0.1" && h != "::1" && h != "localhost" && !plaintext {
			// serve listens on an address of its own (a LAN address, say),
			// which its certificate need not name: check it against the
			// public URL's host, which it does.
			if cfg.ServerName, err = config.PublicHost(c.PublicURL); err != nil {
				return cfg, from, err
			}
		}
		scheme := "https://"
		if plaintext {
			scheme = "http://"
		}
		cfg.Addresses = []string{scheme + net.JoinHostPort(h, port)}
		if apiKeyFile == "" {
			apiKeyFile = filepath.Join(dir, config.FileAPIKey)
		}
		if caFile == "" && !plaintext {
			caFile = filepath.Join(dir, config.FileCACert)
		}
	case server != "":
		plaintextOnly := true
		var bad []error
		for _, s := range strings.Split(server, ",") {
			s = strings.TrimSpace(s)
			if i := strings.Index(s, "://"); i > 0 {
				s = strings.ToLower(s[:i]) + s[i:] // HTTPS:// is https://
			}
			if !strings.HasPrefix(s, "https://") && !strings.HasPrefix(s, "http://") {
				return cfg, from, fmt.Errorf("--server %q must be https://HOST:PORT", s)
			}
			if _, err := hostport.Parse(s); err != nil {
				// Every bad address at once, each named as the flag's.
				bad = append(bad, fmt.Errorf("--server %w", err))
				continue
			}
			if hostPort, ok := strings.CutPrefix(s, "http://"); ok && config.RequireLoopback(strings.TrimSuffix(hostPort, "/")) != nil {
				// An automator serves plaintext on loopback only: the API
				// key would cross the network in clear to something else.
				return cfg, from, fmt.Errorf("--server %q: http:// is for an automator serving plaintext on loopback only; give https://%s", s, strings.TrimSuffix(hostPort, "/"))
			}
			plaintextOnly = plaintextOnly && strings.HasPrefix(s, "http://")
			cfg.Addresses = append(cfg.Addresses, s)
		}
		if len(bad) > 0 {
			return cfg, from, errors.Join(bad...)
		}
		if apiKeyFile == "" {
			return cfg, from, errors.New("--api-key-file is required with --server")
		}
		if caFile == "" && !plaintextOnly {
			return cfg, from, errors.New("--ca is required with --server (the automator's ca.pem)")
		}
	default:
		return cfg, from, errors.New("give --data-dir (on the automator's host) or --server with --api-key-file and --ca")
	}
	if cfg.APIKey, err = readAPIKeyFile(apiKeyFile); err != nil {
		return cfg, from, err
	}
	if caFile != "" {
		if cfg.CAPEM, err = secretfile.ReadFile(caFile, maxCAFile); err != nil {
			return cfg, from, fmt.Errorf("reading CA certificate: %w", err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(cfg.CAPEM) {
			return cfg, from, fmt.Errorf("CA certificate %s holds no PEM certificate (give the automator's ca.pem)", caFile)
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, from, fmt.Errorf("--server or --data-dir: %w", err)
	}
	return cfg, from, nil
}
