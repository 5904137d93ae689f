package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/pki"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// maxStdin is what exec reads from --stdin at most (the server's default
// limit); more is refused before anything is queued.
const maxStdin = 1 << 20

// cmdExec is executeOnProxy from the shell. It submits once, then waits by
// work id, waiting again on a new connection if the automator restarts, so a
// unit is never submitted twice. Ctrl-C cancels the unit.
func cmdExec(ctx context.Context, args []string, env Env) (int, error) {
	fs := newFlags("exec", env)
	dir := fs.String("data-dir", "", "the automator's data directory (on the automator's host)")
	server := fs.String("server", "", "automator URL https://HOST:PORT (away from its host)")
	apiKeyFile := fs.String("api-key-file", "", "file holding the API key (with --server)")
	caFile := fs.String("ca", "", "the automator's CA certificate (with --server)")
	account := fs.String("account", "", "account whose proxies run the command")
	timeout := fs.Duration("timeout", 0, "time from queueing to the deadline (default: the server's, 5m)")
	stdinFrom := fs.String("stdin", "", "file to send as the script's stdin, or - for this process's stdin")
	if err := fs.Parse(args); err != nil {
		return 0, err
	}
	if fs.NArg() == 0 {
		return 0, errors.New("exec: SCRIPT is required")
	}
	if err := requireFlag("account", *account); err != nil {
		return 0, err
	}
	if *timeout < 0 {
		return 0, fmt.Errorf("--timeout %v must be positive", *timeout)
	}
	stdin, err := readStdin(*stdinFrom, env.Stdin)
	if err != nil {
		return 0, err
	}
	conn, err := dial(*dir, *server, *apiKeyFile, *caFile)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	client := automatorv1.NewAutomatorServiceClient(conn)

	req := &automatorv1.ExecuteRequest{
		Account: *account,
		Command: &automatorv1.Command{Script: fs.Arg(0), Args: fs.Args()[1:], Stdin: stdin},
	}
	if *timeout > 0 {
		req.Timeout = durationpb.New(*timeout)
	}
	sub, err := client.Submit(ctx, req)
	if err != nil {
		return 0, rpcError("submitting", err)
	}
	st, err := waitFor(ctx, client, sub)
	if ctx.Err() != nil {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, cerr := client.Cancel(cctx, &automatorv1.CancelRequest{WorkId: sub.GetWorkId()}); cerr != nil {
			return 0, rpcError("cancelling work "+sub.GetWorkId(), cerr)
		}
		fmt.Fprintf(env.Stderr, "automator: work %s cancelled (interrupted)\n", sub.GetWorkId())
		return ExitCancelled, nil
	}
	if err != nil {
		return 0, err
	}
	return report(st, env), nil
}

// waitFor waits by id until the unit ends, riding out automator restarts
// until a minute past the unit's deadline.
func waitFor(ctx context.Context, client automatorv1.AutomatorServiceClient, sub *automatorv1.WorkStatus) (*automatorv1.WorkStatus, error) {
	giveUp := sub.GetDeadline().AsTime().Add(time.Minute)
	delay := 100 * time.Millisecond
	for {
		st, err := client.Wait(ctx, &automatorv1.WaitRequest{WorkId: sub.GetWorkId()})
		if err == nil {
			return st, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if status.Code(err) != codes.Unavailable || time.Now().After(giveUp) {
			return nil, rpcError("waiting for work "+sub.GetWorkId(), err)
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// report writes the outcome and returns the exit code DESIGN.md names.
func report(st *automatorv1.WorkStatus, env Env) int {
	r := st.GetResult()
	switch st.GetState() {
	case automatorv1.State_STATE_SUCCEEDED:
		env.Stdout.Write(r.GetStdout())
		env.Stderr.Write(r.GetStderr())
		if r.GetStdoutTruncated() || r.GetStderrTruncated() {
			fmt.Fprintf(env.Stderr, "automator: output of work %s was truncated by the proxy's output limit\n", st.GetWorkId())
		}
		code := int(r.GetExitCode())
		if code < 0 || code > 255 {
			code = ExitError
		}
		return code
	case automatorv1.State_STATE_TIMED_OUT:
		fmt.Fprintf(env.Stderr, "automator: work %s timed out: %s\n", st.GetWorkId(), st.GetReason())
		return ExitTimeout
	case automatorv1.State_STATE_FAILED:
		fmt.Fprintf(env.Stderr, "automator: work %s failed: %s\n", st.GetWorkId(), st.GetReason())
		return ExitFailed
	case automatorv1.State_STATE_CANCELLED:
		fmt.Fprintf(env.Stderr, "automator: work %s cancelled: %s\n", st.GetWorkId(), st.GetReason())
		return ExitCancelled
	}
	fmt.Fprintf(env.Stderr, "automator: work %s ended in unexpected state %v\n", st.GetWorkId(), st.GetState())
	return ExitError
}

func readStdin(from string, stdin io.Reader) ([]byte, error) {
	var r io.Reader
	switch from {
	case "":
		return nil, nil
	case "-":
		r = stdin
	default:
		f, err := os.Open(from)
		if err != nil {
			return nil, fmt.Errorf("--stdin: %w", err)
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, maxStdin+1))
	if err != nil {
		return nil, fmt.Errorf("--stdin: reading: %w", err)
	}
	if len(data) > maxStdin {
		return nil, fmt.Errorf("--stdin: more than %d bytes; the limit is %d", maxStdin, maxStdin)
	}
	return data, nil
}

// rpcError turns an RPC error into one line naming what was being done.
func rpcError(doing string, err error) error {
	if s, ok := status.FromError(err); ok {
		return fmt.Errorf("%s: %s: %s", doing, s.Code(), s.Message())
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// dial connects to the automator as a caller, either on its own host
// (--data-dir: address, CA and admin key from the data directory) or from
// afar (--server, --ca, --api-key-file).
func dial(dir, server, apiKeyFile, caFile string) (*grpc.ClientConn, error) {
	var addr, host string
	var caPEM []byte
	plaintext := false
	switch {
	case dir != "" && server != "":
		return nil, errors.New("give either --data-dir or --server, not both")
	case dir != "":
		cfg, err := config.Load(dir)
		if err != nil {
			return nil, err
		}
		addr = cfg.Listen
		if s, ok, err := config.ReadServing(dir); err != nil {
			return nil, err
		} else if ok {
			addr, plaintext = s.GRPC, s.Plaintext
		}
		h, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("gRPC address %q: %w", addr, err)
		}
		if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
			h = "127.0.0.1"
		}
		addr, host = net.JoinHostPort(h, port), h
		if apiKeyFile == "" {
			apiKeyFile = filepath.Join(dir, config.FileAPIKey)
		}
		if caFile == "" {
			caFile = filepath.Join(dir, config.FileCACert)
		}
	case server != "":
		u, err := url.Parse(server)
		if err != nil || u.Host == "" || u.Port() == "" {
			return nil, fmt.Errorf("--server %q must be https://HOST:PORT", server)
		}
		switch u.Scheme {
		case "https":
		case "http":
			plaintext = true
		default:
			return nil, fmt.Errorf("--server %q must be https://HOST:PORT", server)
		}
		addr, host = u.Host, u.Hostname()
		if apiKeyFile == "" {
			return nil, errors.New("--api-key-file is required with --server")
		}
		if caFile == "" && !plaintext {
			return nil, errors.New("--ca is required with --server (the automator's ca.pem)")
		}
	default:
		return nil, errors.New("give --data-dir (on the automator's host) or --server with --api-key-file and --ca")
	}
	keyData, err := os.ReadFile(apiKeyFile)
	if err != nil {
		return nil, fmt.Errorf("reading API key: %w", err)
	}
	apiKey := strings.TrimSpace(string(keyData))
	if apiKey == "" {
		return nil, fmt.Errorf("API key file %s is empty", apiKeyFile)
	}
	creds := insecure.NewCredentials()
	if !plaintext {
		if caPEM, err = os.ReadFile(caFile); err != nil {
			return nil, fmt.Errorf("reading CA certificate: %w", err)
		}
		tlsCfg, err := pki.ClientTLS(caPEM, host)
		if err != nil {
			return nil, fmt.Errorf("CA certificate %s: %w", caFile, err)
		}
		creds = credentials.NewTLS(tlsCfg)
	}
	return grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithPerRPCCredentials(Bearer{Secret: apiKey, AllowPlaintext: plaintext}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)),
	)
}

// Bearer sends a secret as "authorization: Bearer" on every call.
type Bearer struct {
	Secret string
	// AllowPlaintext lets the secret travel without TLS (loopback tests).
	AllowPlaintext bool
}

func (b Bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.Secret}, nil
}

func (b Bearer) RequireTransportSecurity() bool { return !b.AllowPlaintext }
