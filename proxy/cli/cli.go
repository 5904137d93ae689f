// Package cli is the proxy's command line. The binary's main only calls Main.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"

	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/internal/clihelp"
	"github.com/opsgate/opsgate/internal/grpcwire"
	"github.com/opsgate/opsgate/internal/printable"
	"github.com/opsgate/opsgate/internal/scriptenv"
	"github.com/opsgate/opsgate/internal/secretfile"
	"github.com/opsgate/opsgate/internal/stopsignal"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/agent"
	"github.com/opsgate/opsgate/proxy/config"
	"github.com/opsgate/opsgate/proxy/runner"
	"github.com/opsgate/opsgate/proxy/service"
	"github.com/opsgate/opsgate/version"
)

const usage = `usage:
  proxy run     --config FILE [--instance-id ID] [--scripts-dir DIR] [--state-dir DIR] [--log-format text|json]
  proxy install --config FILE [--name NAME] [--user USER] [--manual-start]
  proxy start|stop|status|uninstall [--name NAME]
  proxy version                     # this build's version (also --version)

install makes the OS service NAME (default "proxy") that runs
  proxy --service NAME run --config <its copy of FILE>

exit codes: 0 done (run: stopped by a signal or the service manager); 1 the command failed,
with one line on stderr (run: a config, a flag or a file refused, or the proxy ended on an
error; status: the service is not installed).

` + "`proxy help COMMAND`" + ` (or ` + "`proxy COMMAND --help`" + `) shows one command's flags.
`

// Env is what a command may touch of the outside world.
type Env struct {
	Stdout io.Writer
	Stderr io.Writer
	// Reaper: `proxy run` may start this very binary as the reaper of its
	// scripts (runner.NewReaper), because its main serves
	// runner.ReaperEnv first. False where the CLI runs inside another
	// program (a test binary): scripts then outlive a proxy that dies.
	Reaper bool
}

// Main runs one command and returns the exit code (0, or 1 on error with
// one line on stderr).
func Main(ctx context.Context, args []string, env Env) int {
	if err := run(ctx, args, env); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // the command's flag set printed its help
		}
		if errors.As(err, new(errLogged)) {
			return 1 // the service logged it
		}
		fmt.Fprintf(env.Stderr, "proxy: %s\n", clihelp.OneLineStopped(ctx, err))
		return 1
	}
	return 0
}

func run(ctx context.Context, args []string, env Env) error {
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, usage)
		return errors.New("no command given")
	}
	if name, rest, ok, err := service.SplitServiceFlag(args); ok || err != nil {
		if err != nil {
			return err
		}
		return runService(ctx, name, rest, env)
	}
	switch args[0] {
	case "run":
		return cmdRun(ctx, args[1:], env)
	case "install", "start", "stop", "status", "uninstall":
		return serviceCommand(args[0], args[1:], env)
	case "version", "--version":
		if len(args) > 1 && slices.Contains([]string{"-h", "--help", "help"}, args[1]) {
			fmt.Fprintln(env.Stdout, "usage:\n"+strings.Join(clihelp.Forms(usage, "proxy", "version"), "\n"))
			return nil
		}
		if len(args) > 1 {
			return fmt.Errorf("%s takes no arguments", args[0])
		}
		fmt.Fprintln(env.Stdout, version.Line("proxy"))
		return nil
	case "help", "-h", "--help":
		if len(args) > 1 && args[0] == "help" {
			// `proxy help run` is `proxy run --help`.
			return run(ctx, append(slices.Clone(args[1:]), "--help"), env)
		}
		fmt.Fprint(env.Stdout, usage)
		return nil
	}
	return fmt.Errorf("unknown command %q; run `proxy help`", args[0])
}

// cmdRun is `proxy run`. With the JSON log format its error, its last log
// line, is a JSON record too, which Main does not print again.
func cmdRun(ctx context.Context, args []string, env Env) error {
	cfg, file, err := runConfig(args, env)
	if err == nil {
		err = runProxy(ctx, cfg, file, env)
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) && runLogFormat(args) == "json" {
		newLogger(env.Stderr, "json").Error("proxy ended", "err", err)
		return errLogged{err}
	}
	return err
}

// loadedConfig is the config file a proxy was started with: its absolute
// path and the digest of the bytes read (config.Digest).
type loadedConfig struct{ path, digest string }

// runConfig parses the flags of `proxy run` and returns the valid config
// they name, and the file it was read from.
func runConfig(args []string, env Env) (config.Config, loadedConfig, error) {
	fs := flag.NewFlagSet("proxy run", flag.ContinueOnError)
	fs.Usage = clihelp.Usage(env.Stdout, usage, "proxy", "run", fs) // quiet on a parse error: Main prints the one-line reason
	path := fs.String("config", "", "proxy config file (the profile from `automator account create` plus local settings)")
	instanceID := fs.String("instance-id", "", "this instance's id (overrides instance_id; default the host name)")
	scriptsDir := fs.String("scripts-dir", "", "directory of runnable scripts (overrides scripts_dir)")
	stateDir := fs.String("state-dir", "", "absolute directory for the status file, the lock and the spool (overrides state_dir)")
	logFormat := fs.String("log-format", "", "log format: text (the default) or json (overrides log_format)")
	if err := clihelp.ParseNoArgs(fs, args); err != nil {
		return config.Config{}, loadedConfig{}, err
	}
	if *path == "" {
		return config.Config{}, loadedConfig{}, errors.New("--config is required")
	}
	cfg, digest, err := config.LoadDigest(*path)
	if err != nil {
		return config.Config{}, loadedConfig{}, err
	}
	abs, err := filepath.Abs(*path)
	if err != nil {
		return config.Config{}, loadedConfig{}, err
	}
	if *instanceID != "" {
		cfg.InstanceID = *instanceID
	}
	if *scriptsDir != "" {
		cfg.ScriptsDir = *scriptsDir
	}
	// One state_dir serves one running proxy: a flag gives each instance
	// started from a shared file one of its own.
	if *stateDir != "" {
		cfg.StateDir = *stateDir
	}
	if *logFormat != "" {
		cfg.LogFormat = *logFormat
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		src := *path
		if *instanceID != "" || *scriptsDir != "" || *stateDir != "" || *logFormat != "" {
			src += " or flags" // a bad value may be a flag's, not the file's
		}
		return config.Config{}, loadedConfig{}, fmt.Errorf("invalid proxy config %s: %w", src, err)
	}
	return cfg, loadedConfig{path: abs, digest: digest}, nil
}

// runProxy runs the agent of a valid config until ctx is cancelled. It
// holds the config's state_dir meanwhile, before anything is written there:
// a second proxy on it (`proxy run` or the service) is refused at once,
// with nothing changed for the one that holds it.
func runProxy(ctx context.Context, cfg config.Config, file loadedConfig, env Env) error {
	if cfg.StateDir != "" {
		lock, err := agent.LockStateDir(cfg.StateDir)
		if err != nil {
			return err
		}
		defer lock.Release()
	}
	keys, err := cfg.Keys() // key, then previous_keys
	if err != nil {
		return err
	}
	conn, err := Dial(cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	uploads, err := DialUploads(cfg)
	if err != nil {
		return err
	}
	defer uploads.Close()
	log := newLogger(env.Stderr, cfg.LogFormat)
	host, _ := os.Hostname()
	host = reportedHostname(host)
	endGrace, stopWatching := secondStop(ctx)
	defer stopWatching()
	var reaper *runner.Reaper
	if env.Reaper {
		reaper = runner.NewReaper(func(err error) { log.Warn("scripts may outlive this proxy if it dies", "err", err) },
			runner.ReaperLog{JSON: cfg.LogFormat == "json", InstanceID: cfg.InstanceID})
		defer reaper.Close() // after a.Run: no script runs any more
	}
	addr, _, _ := cfg.Target() // valid
	route := dialRoute(os.Getenv, addr)
	a := agent.New(agent.Options{
		Client:    automatorv1.NewProxyServiceClient(conn),
		Conn:      conn,
		Uploads:   automatorv1.NewProxyServiceClient(uploads),
		Automator: cfg.AutomatorURL,
		Route:     route,
		Resolve: func(ctx context.Context) error {
			return resolveProblem(ctx, net.DefaultResolver, os.Getenv, addr)
		},
		Keys:           keys,
		InstanceID:     cfg.InstanceID,
		Hostname:       host,
		Version:        version.Version,
		ScriptsDir:     cfg.ScriptsDir,
		MaxConcurrency: cfg.MaxConcurrency,
		MaxOutput:      cfg.MaxOutputBytes,
		AllowedEnv:     cfg.AllowedEnv,
		GracePeriod:    cfg.GracePeriod,
		EndGrace:       endGrace,
		Logger:         log,
		StateFile:      stateFile(cfg),
		ConfigFile:     file.path,
		ConfigSHA256:   file.digest,
		SpoolDir:       spoolDir(cfg),
		Reaper:         reaper,
	})
	log.Info("proxy starting", "instance_id", cfg.InstanceID, "automator", cfg.AutomatorURL, "route", route, "scripts_dir", cfg.ScriptsDir, "max_concurrency", cfg.MaxConcurrency, "key_ids", keys.IDs(), "version", version.Version)
	if who := secretfile.ReadableByOthers(file.path); who != "" {
		log.Warn("the config holds the account's token and key, and is readable by "+who+": whoever reads it may poll as this proxy and open its commands; "+secretfile.Restrict, "config", file.path)
	}
	if loose := writableByOthers(cfg.ScriptsDir); len(loose) > 0 {
		// Not refused: the operator may mean it. But whoever may write
		// there decides what this proxy runs, as its user.
		log.Warn(looseScriptsWarning, "writable", loose)
	}
	for _, why := range scriptenv.Allowlist(cfg.AllowedEnv).Useless() {
		log.Warn("allowed_env lists what no command may set: "+why, "config", file.path)
	}
	if scriptenv.Allowlist(cfg.AllowedEnv).AllowsAny() {
		log.Warn(scriptenv.AnyWarning, "config", file.path)
	}
	for _, t := range unrunnable(cfg.ScriptsDir, true) {
		log.Warn(t.warning, "scripts", listed(t.scripts))
	}
	return a.Run(ctx)
}

// stopSignals ask the process to stop (as in main).
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

// secondStop returns a channel closed when the process is asked to stop
// (SIGINT, SIGTERM) a second time: the first stop (it cancels ctx, in main
// or the service manager) waits out the grace period of running scripts,
// the second ends it, as a second Ctrl-C is expected to. Under the Windows
// Service Control Manager, which stops the service by its own requests
// (stopsignal.List), it is never closed.
func secondStop(ctx context.Context) (<-chan struct{}, func()) {
	if len(stopsignal.List()) == 0 {
		return nil, func() {}
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, stopSignals...) // the first one too: it stopped ctx
	again := make(chan struct{})
	quit := make(chan struct{})
	go watchSecondStop(ctx, sigs, again, quit)
	return again, func() { signal.Stop(sigs); close(quit) }
}

// watchSecondStop closes again once sigs has delivered two stop signals
// and ctx is done (the first stop), whichever comes last, unless quit is
// closed first. Both signals may come before the first has cancelled ctx
// (they were counted before it was done): the second stop is then waited
// for on ctx, not on a third signal (a review: the grace period was waited
// out).
func watchSecondStop(ctx context.Context, sigs <-chan os.Signal, again, quit chan struct{}) {
	seen := 0
	for {
		var stopped <-chan struct{}
		if seen >= 2 {
			stopped = ctx.Done()
		}
		select {
		case <-sigs:
			seen++
		case <-stopped:
		case <-quit:
			return
		}
		if seen >= 2 && ctx.Err() != nil {
			close(again)
			return
		}
	}
}

// spoolDir is where the agent keeps results until they are posted: the
// spool in the config's state_dir, if any.
func spoolDir(cfg config.Config) string {
	if cfg.StateDir == "" {
		return ""
	}
	return filepath.Join(cfg.StateDir, agent.SpoolDirName)
}

// Dial opens the connection to the automator: TLS trusting only the
// profile's CA, the token on every call, and keepalives so a connection cut
// by a middlebox is noticed within seconds. Outbound HTTP CONNECT proxies
// from HTTPS_PROXY are honoured by grpc-go's default dialer; without one,
// or with one that does not apply to the automator (NO_PROXY), it dials
// with grpcwire.FastSYNDial.
func Dial(cfg config.Config) (*grpc.ClientConn, error) {
	return dial(cfg, grpc.WithKeepaliveParams(Keepalive))
}

// DialUploads opens the connection over which the proxy posts large
// results (agent.Options.Uploads), as Dial does but with UploadKeepalive,
// and closed after uploadsIdle without a call (dialled again at the next).
func DialUploads(cfg config.Config) (*grpc.ClientConn, error) {
	return dial(cfg, grpc.WithKeepaliveParams(UploadKeepalive), grpc.WithIdleTimeout(uploadsIdle))
}

func dial(cfg config.Config, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	addr, useTLS, err := cfg.Target()
	if err != nil {
		return nil, err
	}
	creds := grpcwire.LoopbackOnly(insecure.NewCredentials())
	if useTLS {
		host, _, _ := net.SplitHostPort(addr)
		pins, err := cfg.Pins()
		if err != nil {
			return nil, err
		}
		tlsCfg, err := pki.ClientTLSPinned([]byte(cfg.CACert), pins, host)
		if err != nil {
			return nil, fmt.Errorf("ca_cert: %w", err)
		}
		creds = credentials.NewTLS(tlsCfg)
	}
	opts = append(opts, grpcwire.DialOptions()...)
	opts = append(opts, grpcwire.WatchAnswers()...)
	opts = append(opts, resolveOptions...)
	if dialsDirect(os.Getenv, addr) {
		// Direct, as gRPC would dial: a connection attempt over a link
		// that drops packets sends its SYN again every second, so the
		// proxy connects within a second of the link's return, not at
		// the kernel's next retransmission, up to 8 s and more later.
		// Not through a web proxy: gRPC's own dialer sets up its tunnel.
		opts = append(opts, grpc.WithContextDialer(grpcwire.FastSYNDial))
	}
	return grpc.NewClient(addr, append(opts,
		grpc.WithTransportCredentials(lowatCreds{creds}),
		grpc.WithPerRPCCredentials(grpcwire.Bearer(cfg.Token, useTLS)),
		// So that the automator names this instance when it refuses a
		// call of it before reading the request (a wrong token).
		grpc.WithPerRPCCredentials(grpcwire.Instance(cfg.InstanceID)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(8<<20), grpc.MaxCallSendMsgSize(8<<20)),
		grpc.WithConnectParams(Reconnect),
		// A poll's claims count from when its request was written, after
		// any wait for the connection (agent.SendTimes).
		grpc.WithStatsHandler(agent.SendTimes()),
	)...)
}

// resolveOptions are how the proxy resolves the automator's name: gRPC's
// DNS resolver without its lookup of a service config (a TXT record,
// _grpc_config.HOST), which the proxy has no use for. That lookup asks the
// DNS servers even for a name the hosts file has, and a DNS server that
// does not answer held every start, and every new connection after a
// failover, 10 s (two tries 5 s apart; a review, in network namespaces).
var resolveOptions = []grpc.DialOption{grpc.WithDisableServiceConfig()}

// Reconnect is how the proxy dials the automator again after losing it:
// within a few seconds of its return (a restart, an upgrade), where
// gRPC's default backs off up to two minutes, during which polls fail at
// once and queued work waits. The poll loop's own backoff (up to 15 s)
// keeps an automator that stays down from being called in a loop.
//
// A connection's setup is given grpcwire.SetupWithin, its TLS handshake
// grpcwire.HandshakeWithin of it (lowatCreds): a link with a round trip of
// up to about 5 s under load connects, and an automator that accepts the
// connection and answers nothing is given up after 5 s.
var Reconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
	MinConnectTimeout: grpcwire.SetupWithin,
}

// Keepalive is the keepalive of the connection that polls (Dial): a ping
// after 10 s without traffic, answered within 5 s, or the connection is
// dropped and dialled again, so a connection a middlebox silently forgot
// is noticed within 15 s. 10 s is the fastest the automator accepts (its enforcement
// MinTime). The bench's idle instances use it too.
var Keepalive = keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}

// UploadKeepalive is the keepalive of the connection that posts large
// results (DialUploads). Its ping waits behind what of the result gRPC
// (its write buffer, 32 KiB) and the kernel (grpcwire.NotSentLowat, and the bytes in
// flight) already hold: about 60 KB, 7.5 s at 64 kbit/s, the slowest
// upload a post is given time for. 20 s leaves room for that and a slow
// round trip; a connection cut mid-upload is noticed within 30 s. The
// connection that polls keeps Keepalive: no large result is queued ahead
// of its ping.
var UploadKeepalive = keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 20 * time.Second}

// uploadsIdle: the connection that posts large results is closed after this
// long without a call, so that a proxy holds one connection to the
// automator most of the time.
const uploadsIdle = time.Minute

// maxReportedHostname is the longest host name the automator takes with a
// poll (a DNS name is at most 253 bytes).
const maxReportedHostname = 255

// reportedHostname is the host name as the proxy reports it with its
// polls, for the listings: each character the automator refuses there (a
// control, format or separator character, which a host name should never
// hold) replaced by U+FFFD, and cut to the length it takes, so that an odd
// host name, which is only shown, does not get every poll refused.
func reportedHostname(h string) string {
	h = strings.ToValidUTF8(h, string(utf8.RuneError))
	for i := printable.FirstNotShown(h); i >= 0; i = printable.FirstNotShown(h) {
		_, n := utf8.DecodeRuneInString(h[i:])
		h = h[:i] + string(utf8.RuneError) + h[i+n:]
	}
	for len(h) > maxReportedHostname {
		_, n := utf8.DecodeLastRuneInString(h)
		h = h[:len(h)-n]
	}
	return h
}
