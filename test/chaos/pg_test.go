//go:build linux

package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opsgate/opsgate/internal/proctest"
)

// pgServer is a throwaway PostgreSQL cluster of the run's own, started by
// scripts/pg-start.sh: the run crashes and stops it, so it cannot share the
// server other packages' tests use (AUTOMATOR_TEST_POSTGRES).
type pgServer struct {
	URL  string
	dir  string // the cluster's directory (pg-start.sh's AUTOMATOR_TEST_PGDIR)
	ctl  string // pg_ctl of the binaries that run it
	port string
	// The cluster's owner, who runs pg_ctl, when the test runs as root.
	cred *syscall.Credential
	// reserved releases the port held while the cluster is stopped.
	reserved func()
	// onAddrInUse, when set, is called when a start failed because the
	// port was taken, before start waits to try again.
	onAddrInUse func(error)
	starts      int // pg_ctl starts run by start
}

// startPG starts the cluster; it is removed when the test ends. Without
// PostgreSQL binaries the test is skipped, or fails under
// AUTOMATOR_REQUIRE_POSTGRES (make test).
func startPG(t *testing.T) *pgServer {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "pg-start.sh"))
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(script)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == 3 && os.Getenv("AUTOMATOR_REQUIRE_POSTGRES") == "" {
			t.Skipf("no PostgreSQL installed: %s", strings.TrimSpace(stderr.String()))
		}
		t.Fatalf("scripts/pg-start.sh: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	pg := &pgServer{}
	for _, line := range strings.Split(stdout.String(), "\n") {
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok {
			continue
		}
		switch v = strings.Trim(v, "'"); k {
		case "AUTOMATOR_TEST_POSTGRES":
			pg.URL = v
		case "AUTOMATOR_TEST_PGDIR":
			pg.dir = v
		}
	}
	if pg.URL == "" || pg.dir == "" {
		t.Fatalf("scripts/pg-start.sh printed no URL and directory: %q", stdout.String())
	}
	t.Cleanup(func() {
		stop := filepath.Join(filepath.Dir(script), "pg-stop.sh")
		if out, err := exec.Command(stop, pg.dir).CombinedOutput(); err != nil {
			t.Errorf("scripts/pg-stop.sh: %v: %s", err, out)
		}
	})
	// postmaster.opts starts with the path of the postgres binary.
	opts, err := os.ReadFile(filepath.Join(pg.dir, "data", "postmaster.opts"))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(opts))
	if len(fields) == 0 {
		t.Fatalf("postmaster.opts is empty")
	}
	pg.ctl = filepath.Join(filepath.Dir(fields[0]), "pg_ctl")
	port, err := os.ReadFile(filepath.Join(pg.dir, "port"))
	if err != nil {
		t.Fatal(err)
	}
	pg.port = strings.TrimSpace(string(port))
	if os.Getuid() == 0 {
		fi, err := os.Stat(filepath.Join(pg.dir, "data"))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		pg.cred = &syscall.Credential{Uid: st.Uid, Gid: st.Gid, Groups: []uint32{}}
	}
	// pg-start.sh's cluster does not wait for the WAL at commit
	// (synchronous_commit off): a crash of PostgreSQL would lose commits it
	// acknowledged. The replicas' guarantees rest on a durable commit, so
	// this cluster waits. (fsync stays off: the machine does not crash,
	// only PostgreSQL, and what it wrote is in the page cache.)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{"ALTER SYSTEM SET synchronous_commit = on", "SELECT pg_reload_conf()"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return pg
}

// pgCtl runs pg_ctl on the cluster as its owner.
func (pg *pgServer) pgCtl(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, pg.ctl, append([]string{"-D", filepath.Join(pg.dir, "data")}, args...)...)
	cmd.Dir = pg.dir
	if pg.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: pg.cred}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// crash is an immediate restart: every PostgreSQL process quits at once,
// without a checkpoint, and the server recovers from its WAL when it starts
// again. It returns once it accepts connections.
func (pg *pgServer) crash() error {
	if err := pg.pgCtl("stop", "-m", "immediate", "-w", "-t", "60"); err != nil {
		return err
	}
	return pg.start()
}

// stop is a fast shutdown: sessions are ended, a checkpoint written. The
// port stays reserved until start (reservePort).
func (pg *pgServer) stop() error {
	if err := pg.pgCtl("stop", "-m", "fast", "-w", "-t", "60"); err != nil {
		return err
	}
	pg.reserved = reservePort(pg.port)
	return nil
}

// start starts the stopped cluster on its port. A start is tried again,
// five times in all, only when PostgreSQL could not bind the port ("Address
// already in use": taken after all), once the port can be bound; any other
// failure is reported at once.
func (pg *pgServer) start() error {
	if pg.reserved != nil {
		pg.reserved()
		pg.reserved = nil
	}
	logPath := filepath.Join(pg.dir, "postgres.log")
	var err error
	for attempt := 1; ; attempt++ {
		from := fileSize(logPath)
		pg.starts++
		if err = pg.pgCtl("start", "-w", "-t", "120", "-l", logPath, "-o", "-p "+pg.port); err == nil {
			return nil
		}
		if attempt == 5 || !pgAddrInUse(logPath, from) {
			break
		}
		if pg.onAddrInUse != nil {
			pg.onAddrInUse(err)
		}
		if !proctest.Poll(5*time.Second, func() bool { return canListen("127.0.0.1:" + pg.port) }) {
			err = fmt.Errorf("%w; its port was still taken 5s later", err)
			break
		}
	}
	log, _ := os.ReadFile(logPath)
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	return fmt.Errorf("%w; the end of postgres.log:\n%s", err, strings.Join(lines[max(0, len(lines)-8):], "\n"))
}

// fileSize is the size of the file at path, 0 when it cannot be read.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// pgAddrInUse reports whether PostgreSQL's log, from offset from on, says
// it could not bind an address because it was in use ("could not bind
// IPv4 address ...: Address already in use").
func pgAddrInUse(logPath string, from int64) bool {
	log, err := os.ReadFile(logPath)
	if err != nil || int64(len(log)) < from {
		return false
	}
	return strings.Contains(strings.ToLower(string(log[from:])), syscall.EADDRINUSE.Error())
}

// reservePort binds a socket to 127.0.0.1:port without listening on it,
// while PostgreSQL is stopped, and returns what releases it. The cluster's
// port is one of the ephemeral range, and the run opens connections all
// the time (health checks, reconnections): without it, one of them may be
// given the port as its own end while PostgreSQL is down, and PostgreSQL
// cannot listen on it again ("Address already in use": a long run lost
// its database so). The kernel gives no connection a port that a socket is
// bound to, and a connection to a bound socket that does not listen is
// refused, as to a stopped server. It reserves nothing (and releases
// nothing) when the bind fails.
func reservePort(port string) (release func()) {
	n, err := strconv.Atoi(port)
	if err != nil {
		return func() {}
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return func() {}
	}
	// SO_REUSEADDR: the connections PostgreSQL just closed linger in
	// TIME_WAIT on the port.
	if syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1) != nil ||
		syscall.Bind(fd, &syscall.SockaddrInet4{Port: n, Addr: [4]byte{127, 0, 0, 1}}) != nil {
		syscall.Close(fd)
		return func() {}
	}
	return func() { syscall.Close(fd) }
}

// newReplicas initialises one automator on the database at url and gives
// n replicas copies of its data directory (same keys, certificate and API
// key), each with a port of its own (and an HTTP port, for the health
// checks), as docs/several-automators.md says to set them up; Serve starts
// each.
func newReplicas(t *testing.T, dir, url string, n int) []*automator {
	t.Helper()
	binaries(t)
	var out []*automator
	for i := range n {
		id := fmt.Sprintf("r%d", i)
		out = append(out, &automator{t: t, dir: dir, DataDir: filepath.Join(dir, "data-"+id), Host: "127.0.0.1", Port: proctest.FreePort(t), HTTPPort: proctest.FreePort(t), Plaintext: true, ReplicaID: id})
	}
	first := out[0]
	if o, err := exec.Command(bins.Automator, "init", "--data-dir", first.DataDir, "--db", url,
		"--public-url", fmt.Sprintf("https://%s:%d", first.Host, first.Port)).CombinedOutput(); err != nil {
		t.Fatalf("automator init: %v\n%s", err, o)
	}
	for _, a := range out[1:] {
		proctest.CopyDataDir(t, first.DataDir, a.DataDir)
	}
	return out
}

// viaRelay returns url with its host and port replaced by addr (a relay in
// front of the server).
func viaRelay(t *testing.T, rawURL, addr string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	return u.String()
}

// addr is the host:port of the cluster.
func (pg *pgServer) addr(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}
