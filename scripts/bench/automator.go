//go:build linux

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/internal/grpcwire"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	proxyconfig "github.com/opsgate/opsgate/proxy/config"
)

// maxMessage is the message bound of the automator and its clients.
const maxMessage = 8 << 20

// automator is one `automator serve` process (a replica) and what a caller
// needs to reach it.
type automator struct {
	name      string
	dir       string // data directory
	addr      string // gRPC 127.0.0.1:PORT
	pprofAddr string // empty unless profiling
	httpAddr  string // HTTP 127.0.0.1:PORT: /metrics
	proc      *proc
	caPEM     []byte
	apiKey    string
}

// initAutomator makes a data directory whose public URL is on a free
// loopback port; db is a DSN, or empty for SQLite in the directory.
func (b *bench) initAutomator(name, db string) (dir, addr string, err error) {
	dir = filepath.Join(b.tmp, name)
	port, err := freePort()
	if err != nil {
		return "", "", err
	}
	addr = fmt.Sprintf("127.0.0.1:%d", port)
	args := []string{"init", "--data-dir", dir, "--public-url", "https://" + addr}
	if db != "" {
		args = append(args, "--db", db)
	}
	if _, err := run(b.automatorBin(), args...); err != nil {
		return "", "", err
	}
	return dir, addr, nil
}

// serve starts `automator serve` on dir, listening on addr, and waits until
// it answers.
func (b *bench) serve(name, dir, addr, replicaID string) (*automator, error) {
	a := &automator{name: name, dir: dir, addr: addr}
	var env []string
	if b.profDir != "" {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		a.pprofAddr = fmt.Sprintf("127.0.0.1:%d", port)
		env = append(env, "AUTOMATOR_PPROF_ADDR="+a.pprofAddr)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	a.httpAddr = fmt.Sprintf("127.0.0.1:%d", port)
	args := []string{"serve", "--data-dir", dir, "--listen", addr, "--http-listen", a.httpAddr}
	if replicaID != "" {
		args = append(args, "--replica-id", replicaID)
	}
	p, err := b.start(name, env, b.automatorBin(), args...)
	if err != nil {
		return nil, err
	}
	a.proc = p
	if err := p.waitLog("msg=serving", 30*time.Second); err != nil {
		return nil, err
	}
	if a.caPEM, err = os.ReadFile(filepath.Join(dir, config.FileCACert)); err != nil {
		return nil, err
	}
	key, err := os.ReadFile(filepath.Join(dir, config.FileAPIKey))
	if err != nil {
		return nil, err
	}
	a.apiKey = strings.TrimSpace(string(key))
	return a, nil
}

// startAutomator makes a data directory and serves it.
func (b *bench) startAutomator(name string) (*automator, error) {
	dir, addr, err := b.initAutomator(name, "")
	if err != nil {
		return nil, err
	}
	return b.serve(name, dir, addr, "")
}

// profile is an account's proxy profile as `account create` printed it.
type profile struct {
	account string
	text    string
	token   string
}

func (b *bench) createAccount(dir, account string) (profile, error) {
	out, err := run(b.automatorBin(), "account", "create", account, "--data-dir", dir)
	if err != nil {
		return profile{}, err
	}
	cfg, err := proxyconfig.Parse([]byte(out))
	if err != nil {
		return profile{}, fmt.Errorf("parsing the profile of %s: %w", account, err)
	}
	return profile{account: account, text: out, token: cfg.Token}, nil
}

// startProxy runs `proxy run` for one instance of pr, pointed at addr,
// and waits until it polls.
func (b *bench) startProxy(pr profile, addr, instanceID string, maxConcurrency int) (*proc, error) {
	text := pr.text
	// Replicas: the same profile, another automator URL.
	var lines []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "automator_url:") {
			l = "automator_url: https://" + addr
		}
		lines = append(lines, l)
	}
	text = strings.Join(lines, "\n") + fmt.Sprintf("scripts_dir: %s\nmax_concurrency: %d\n", b.scriptsDir, maxConcurrency)
	path := filepath.Join(b.tmp, instanceID+".yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		return nil, err
	}
	p, err := b.start(instanceID, nil, b.proxyBin(), "run", "--config", path, "--instance-id", instanceID)
	if err != nil {
		return nil, err
	}
	if err := p.waitLog("connected to the automator; polling", 30*time.Second); err != nil {
		return nil, err
	}
	return p, nil
}

// ---- gRPC clients ----

// dial opens a connection as callers do: TLS trusting only the automator's
// CA, the secret on every call, 20 s keepalives (proxyClient: a proxy's).
func dial(addr string, caPEM []byte, secret string, extra ...grpc.DialOption) (*grpc.ClientConn, error) {
	tlsCfg, err := pki.ClientTLS(caPEM, "127.0.0.1")
	if err != nil {
		return nil, err
	}
	opts := append(grpcwire.DialOptions(),
		grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
		grpc.WithPerRPCCredentials(grpcwire.Bearer(secret, true)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 20 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
	)
	return grpc.NewClient(addr, append(opts, extra...)...)
}

// caller is a connection with an API key: the AutomatorService.
func (a *automator) caller() (*grpc.ClientConn, automatorv1.AutomatorServiceClient, error) {
	cc, err := dial(a.addr, a.caPEM, a.apiKey)
	if err != nil {
		return nil, nil, err
	}
	return cc, automatorv1.NewAutomatorServiceClient(cc), nil
}

// waitInstances waits until ListInstances shows at least n instances of
// account that polled since since, asking every so often.
func waitInstances(ctx context.Context, api automatorv1.AutomatorServiceClient, account string, n int, since time.Time, timeout, every time.Duration) error {
	deadline := time.Now().Add(timeout)
	seen := 0
	for {
		// Each call is bounded by what is left: an automator that does not
		// answer (its new connections waiting in the listen queue at its
		// limit of open files) held a call without one past the timeout.
		cctx, cancel := context.WithDeadline(ctx, deadline.Add(time.Second))
		resp, err := api.ListInstances(cctx, &automatorv1.ListInstancesRequest{Account: account})
		cancel()
		if err == nil {
			seen = 0
			for _, in := range resp.GetInstances() {
				if !in.GetLastPollAt().AsTime().Before(since) {
					seen++
				}
			}
			if seen >= n {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d instances of %s polled within %v (last error: %v)", seen, n, account, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
