//go:build linux

package cli

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/internal/closedport"
)

// TestAClientCommandOfAGoneAutomatorSaysSoAtOnce: exec, work wait and work
// cancel --data-dir, whose automator was killed (its serving.yaml left
// behind, naming an address nothing listens on), say at once, in one line
// on stderr, which address they dial, where it came from, how to check
// that serve runs, why it failed and until when they keep trying (Ctrl-C
// stops them), and go on trying; stdout stays empty. Stopped by a signal
// then, they say which, not "context canceled". So for a SQLite data
// directory, a PostgreSQL one (the client does not open the database), and
// one whose address is automator.yaml's listen (no serve wrote one).
func TestAClientCommandOfAGoneAutomatorSaysSoAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		db      string // automator.yaml's db; "" keeps init's SQLite
		serving bool   // a serving.yaml left behind
		args    []string
	}{
		{name: "exec sqlite", serving: true, args: []string{"exec", "--data-dir", "DIR", "--account", "acme", "x.sh"}},
		{name: "exec postgres", db: "postgres://automator@127.0.0.1:1/automator", serving: true, args: []string{"exec", "--data-dir", "DIR", "--account", "acme", "x.sh"}},
		{name: "exec listen", args: []string{"exec", "--data-dir", "DIR", "--account", "acme", "x.sh"}},
		{name: "work wait", serving: true, args: []string{"work", "wait", "--data-dir", "DIR", "w_0123456789abcdef0123456789abcdef"}},
		{name: "work cancel", serving: true, args: []string{"work", "cancel", "--data-dir", "DIR", "w_0123456789abcdef0123456789abcdef"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := initDir(t)
			addr := closedport.Addr(t)
			cfg, err := config.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if tc.db != "" {
				cfg.DB = tc.db
			}
			from := filepath.Join(dir, config.FileServing)
			if tc.serving {
				if err := config.WriteServing(dir, config.Serving{GRPC: addr, HTTP: closedport.Addr(t)}); err != nil {
					t.Fatal(err)
				}
			} else {
				cfg.Listen, from = addr, filepath.Join(dir, config.FileConfig)
			}
			if err := config.Save(dir, cfg); err != nil {
				t.Fatal(err)
			}

			// As signal.NotifyContext ends main's context.
			ctx, cancelCause := context.WithCancelCause(t.Context())
			cancel := func() { cancelCause(errors.New("interrupt signal received")) }
			defer cancel()
			var mu sync.Mutex
			var stdout, stderr strings.Builder
			told := make(chan struct{})
			var once sync.Once
			errw := writerFunc(func(b []byte) (int, error) {
				mu.Lock()
				defer mu.Unlock()
				stderr.Write(b)
				if strings.Contains(stderr.String(), "\n") {
					once.Do(func() { close(told) })
				}
				return len(b), nil
			})
			outw := writerFunc(func(b []byte) (int, error) {
				mu.Lock()
				defer mu.Unlock()
				return stdout.Write(b)
			})
			args := append([]string(nil), tc.args...)
			for i, a := range args {
				if a == "DIR" {
					args[i] = dir
				}
			}
			done := make(chan int, 1)
			go func() {
				done <- Main(ctx, args, Env{Stdout: outw, Stderr: errw})
			}()
			select {
			case <-told:
			case code := <-done:
				t.Fatalf("%s ended (exit %d) before saying it keeps trying: %s", tc.args[0], code, stderr.String())
			case <-time.After(20 * time.Second):
				t.Fatalf("%s said nothing on stderr for 20 s while its automator at %s refused connections (it keeps trying for a minute)", tc.args[0], addr)
			}
			select {
			case code := <-done:
				t.Fatalf("%s ended (exit %d) at its first failed try; it keeps trying until the retry budget ends: %s", tc.args[0], code, stderr.String())
			default:
			}
			mu.Lock()
			line, _, _ := strings.Cut(stderr.String(), "\n")
			mu.Unlock()
			for _, want := range []string{addr, from, "connection refused", "automator serve --data-dir " + dir, "trying again for", "Ctrl-C"} {
				if !strings.Contains(line, want) {
					t.Errorf("stderr's first line %q does not say %q", line, want)
				}
			}
			cancel()
			if code := <-done; code != ExitError {
				t.Errorf("%s stopped by a signal: exit %d, want %d", tc.args[0], code, ExitError)
			}
			mu.Lock()
			last := strings.TrimSpace(stderr.String())
			mu.Unlock()
			if i := strings.LastIndex(last, "\n"); i >= 0 {
				last = last[i+1:]
			}
			if !strings.Contains(last, "stopped: interrupt signal received") || strings.Contains(last, "context canceled") {
				t.Errorf("stderr's last line once stopped by a signal: %q; want it to say \"stopped: interrupt signal received\", not \"context canceled\"", last)
			}
			if stdout.String() != "" {
				t.Errorf("stdout %q; want it empty (the notice goes to stderr)", stdout.String())
			}
		})
	}
}
