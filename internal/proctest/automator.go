//go:build linux

package proctest

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/internal/grpcwire"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// ErrAddrInUse is wrapped by WaitServing's error when serve exited because
// an address it was to listen on was taken: a port picked ahead (FreePort)
// that another process bound first. Only then is a start worth retrying on
// another port; any other failure is the test's to report.
var ErrAddrInUse = errors.New("an address to listen on was in use")

// AddrInUse reports whether a process's log says it could not listen
// because the address was in use (EADDRINUSE).
func AddrInUse(log string) bool {
	return strings.Contains(log, syscall.EADDRINUSE.Error())
}

// WaitServing waits up to timeout, twice over, for p, an `automator serve`
// of dataDir, to write serving.yaml and then for its /healthz to answer 200;
// it returns what serving.yaml says.
func WaitServing(p *Proc, dataDir string, timeout time.Duration) (config.Serving, error) {
	var s config.Serving
	ok := Poll(timeout, func() bool {
		if p.Exited() {
			return true
		}
		var found bool
		s, found, _ = config.ReadServing(dataDir)
		return found
	})
	switch {
	case p.Exited():
		err := fmt.Errorf("automator serve exited with %d: %s", p.ExitCode(), p.Tail(5))
		if AddrInUse(p.Log()) {
			err = fmt.Errorf("%w: %w", ErrAddrInUse, err)
		}
		return s, err
	case !ok:
		return s, fmt.Errorf("automator serve wrote no serving.yaml within %v", timeout)
	}
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	if !Poll(timeout, func() bool {
		resp, err := client.Get("http://" + s.HTTP + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		return s, fmt.Errorf("GET http://%s/healthz did not answer 200 within %v", s.HTTP, timeout)
	}
	return s, nil
}

// CreateAccount runs `automator account create name` on dataDir and returns
// the account's proxy profile.
func CreateAccount(t testing.TB, automator, dataDir, name string) string {
	t.Helper()
	r := Run(2*time.Minute, automator, "account", "create", name, "--data-dir", dataDir)
	if r.Code != 0 {
		t.Fatalf("automator account create %s: exit %d: %s", name, r.Code, r.Stderr)
	}
	return r.Stdout
}

// StartProxy runs `proxy run` for one instance, as a child named
// "proxy-INSTANCE".
func StartProxy(t testing.TB, proxy, cfgPath, scriptsDir, instanceID string) *Proc {
	t.Helper()
	return Start(t, "proxy-"+instanceID, proxy, "run",
		"--config", cfgPath, "--scripts-dir", scriptsDir, "--instance-id", instanceID)
}

// WaitPolling fails the test unless the proxy p says within timeout that it
// is connected and polling.
func WaitPolling(t testing.TB, p *Proc, timeout time.Duration) {
	t.Helper()
	WaitFor(t, timeout, p.name+" to start polling", func() bool {
		return strings.Contains(p.Log(), "connected to the automator; polling") || p.Exited()
	})
	if p.Exited() {
		t.Fatalf("%s exited with %d before polling: %s", p.name, p.exit, p.Tail(10))
	}
}

// Caller dials the caller API of the automator serving dataDir on grpcAddr
// the way `automator exec --data-dir` does: TLS trusting the data
// directory's CA, the admin API key as a bearer token.
func Caller(t testing.TB, dataDir, grpcAddr string) automatorv1.AutomatorServiceClient {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(dataDir, config.FileCACert))
	if err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(filepath.Join(dataDir, config.FileAPIKey))
	if err != nil {
		t.Fatal(err)
	}
	return automatorv1.NewAutomatorServiceClient(Dial(t, grpcAddr, caPEM, strings.TrimSpace(string(key))))
}

// Dial connects to an automator's gRPC address over TLS trusting caPEM,
// with secret (an API key or an account token) as a bearer token. The
// connection survives automator restarts (it reconnects) and is closed when
// the test ends.
func Dial(t testing.TB, grpcAddr string, caPEM []byte, secret string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	tlsCfg, err := pki.ClientTLS(caPEM, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
		grpc.WithPerRPCCredentials(grpcwire.Bearer(secret, true)),
	}, opts...)
	conn, err := grpc.NewClient("passthrough:///"+grpcAddr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// AwaitNoOpenPolls waits until the `automator serve` of dataDir holds no
// poll of account open (its automator_polls_open gauge, which has a line
// for every account that ever polled): it has seen the connections of the
// account's instances go. A unit queued before then may be handed to the
// poll of an instance that is already dead, and is lost to its deadline
// like any claim whose answer never arrives.
func AwaitNoOpenPolls(t testing.TB, dataDir, account string, within time.Duration) {
	t.Helper()
	AwaitOpenPolls(t, dataDir, account, 0, within)
}

// AwaitOpenPolls waits until the `automator serve` of dataDir holds n polls
// of account open (its automator_polls_open gauge).
func AwaitOpenPolls(t testing.TB, dataDir, account string, n int, within time.Duration) {
	t.Helper()
	serving, ok, err := config.ReadServing(dataDir)
	if err != nil || !ok {
		t.Fatalf("reading serving.yaml: %v", err)
	}
	line := fmt.Sprintf("automator_polls_open{account=%q} ", account)
	want := strconv.Itoa(n)
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	open := "unknown"
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		resp, err := client.Get("http://" + serving.HTTP + "/metrics")
		if err != nil {
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			continue
		}
		open = "no"
		for _, l := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(l, line); ok {
				open = v
			}
		}
		if open == want {
			return
		}
	}
	t.Fatalf("the automator holds %s polls of %s open after %v, want %d (\"no\": no gauge line for the account)", open, account, within, n)
}

// CopyDataDir copies the regular files of an automator's data directory but
// its serving.yaml, as an operator gives a replica its own copy of the
// first one's (same master key, CA, certificate and API key).
func CopyDataDir(t testing.TB, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == config.FileServing {
			continue
		}
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		src, err := os.Open(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		dst, err := os.OpenFile(filepath.Join(to, e.Name()), os.O_CREATE|os.O_WRONLY|os.O_EXCL, info.Mode().Perm())
		if err != nil {
			src.Close()
			t.Fatal(err)
		}
		_, err = io.Copy(dst, src)
		src.Close()
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
