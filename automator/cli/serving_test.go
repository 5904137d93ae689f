//go:build linux

package cli

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/internal/logtest"
	"github.com/opsgate/opsgate/internal/waittest"
)

// TestServingFileLastsWhileServeRuns: serve records the port it bound
// (listen has port 0) in serving.yaml, where `work wait --data-dir` finds
// it, and removes the file when it stops, since another program may bind
// that port next. With no serve running, a data-dir command says so at
// once instead of dialling a port recorded by a serve that is gone.
func TestServingFileLastsWhileServeRuns(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	listenOnAnyPort(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	log := &logtest.Buffer{}
	go func() { done <- Main(ctx, []string{"serve", "--data-dir", dir}, Env{Stdout: io.Discard, Stderr: log}) }()
	automatortest.WaitFor(t, 15*time.Second, "serve to write serving.yaml", func() bool {
		_, ok, _ := config.ReadServing(dir)
		return ok
	})
	wait := func() (int, string) {
		var out, errb bytes.Buffer
		wctx, wcancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer wcancel()
		code := Main(wctx, []string{"work", "wait", "--data-dir", dir, "w_0123456789abcdef0123456789abcdef"}, Env{Stdout: &out, Stderr: &errb})
		return code, errb.String()
	}
	if code, stderr := wait(); code != ExitNotAllSucceeded || !strings.Contains(stderr, "there is no such unit") {
		t.Fatalf("work wait while serve runs: exit %d, stderr %q; want %d and the automator's answer that there is no such unit", code, stderr, ExitNotAllSucceeded)
	}

	cancel()
	if code := waittest.Recv(t, done, "serve to return after its context was cancelled"); code != 0 {
		t.Fatalf("serve exited %d:\n%s", code, log)
	}
	if _, ok, err := config.ReadServing(dir); ok || err != nil {
		t.Fatalf("serving.yaml after serve stopped: present %v, err %v; want it removed", ok, err)
	}
	if code, stderr := wait(); code != ExitError || !strings.Contains(stderr, "no automator serves from") {
		t.Fatalf("work wait with no serve running: exit %d, stderr %q; want %d and \"no automator serves from\"", code, stderr, ExitError)
	}
}

// TestASecondServeOfOneSQLiteDatabaseIsRefused: SQLite serves one
// automator. A second serve of the same database (on other ports) exits
// 255 at once, naming the database and where the first serves, and the
// first serves on; once it stopped, a serve starts again.
func TestASecondServeOfOneSQLiteDatabaseIsRefused(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	cfg := listenOnAnyPort(t, dir)
	serve := func(ctx context.Context) (chan int, *logtest.Buffer) {
		done, log := make(chan int, 1), &logtest.Buffer{}
		go func() { done <- Main(ctx, []string{"serve", "--data-dir", dir}, Env{Stdout: io.Discard, Stderr: log}) }()
		return done, log
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done, log := serve(ctx)
	automatortest.WaitFor(t, 15*time.Second, "serve to write serving.yaml", func() bool {
		_, ok, _ := config.ReadServing(dir)
		return ok
	})
	s, _, _ := config.ReadServing(dir)
	code, _, stderr := runCLI(t, "serve", "--data-dir", dir)
	if code != ExitError || !strings.Contains(stderr, "another automator serve is using the SQLite database "+cfg.DBPath(dir)) || !strings.Contains(stderr, s.GRPC) || strings.Count(stderr, "\n") != 1 {
		t.Errorf("a second serve: exit %d, stderr %q; want %d and one line naming the database and the first serve", code, stderr, ExitError)
	}
	if got, ok, _ := config.ReadServing(dir); !ok || got != s {
		t.Errorf("serving.yaml after the refused serve: %+v, %v; want the first serve's %+v", got, ok, s)
	}
	cancel()
	if code := waittest.Recv(t, done, "the first serve to return"); code != 0 {
		t.Fatalf("serve exited %d:\n%s", code, log)
	}
	ctx2, cancel2 := context.WithCancel(t.Context())
	defer cancel2()
	done2, log2 := serve(ctx2)
	automatortest.WaitFor(t, 15*time.Second, "a serve started after the first stopped to write serving.yaml", func() bool {
		_, ok, _ := config.ReadServing(dir)
		return ok
	})
	cancel2()
	if code := waittest.Recv(t, done2, "the second serve to return"); code != 0 {
		t.Fatalf("serve after the first stopped exited %d:\n%s", code, log2)
	}
}

// listenOnAnyPort makes serve of the data directory listen on ports the
// system picks, on loopback.
func listenOnAnyPort(t *testing.T, dir string) config.Config {
	t.Helper()
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen, cfg.HTTPListen = "127.0.0.1:0", "127.0.0.1:0"
	if err := config.Save(dir, cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}
