//go:build linux

package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/config"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestExecWhoseUnitTheDatabaseLostSaysSo: a unit exec was told was queued
// and that the automator then no longer finds (its commit lost by a
// PostgreSQL failover to an asynchronous standby; here the automator
// answers NotFound for it after the submit) ends exec, with the data
// directory's admin key (which may read every account), saying that the
// database lost it and that no proxy will claim it, not that it may still
// run for another key. With a key exec cannot vouch for (--api-key-file,
// --server) the hint stays that another key may see it.
func TestExecWhoseUnitTheDatabaseLostSaysSo(t *testing.T) {
	t.Parallel()
	var lost atomic.Value // the unit's id
	loseAfterSubmit := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if id, _ := lost.Load().(string); id != "" {
			switch r := req.(type) {
			case *automatorv1.WaitRequest:
				if r.GetWorkId() == id {
					return nil, status.Errorf(codes.NotFound, "work %q not found", id)
				}
			case *automatorv1.GetRequest:
				if r.GetWorkId() == id {
					return nil, status.Errorf(codes.NotFound, "work %q not found", id)
				}
			}
		}
		resp, err := h(ctx, req)
		if info.FullMethod == automatorv1.AutomatorService_Submit_FullMethodName && err == nil {
			lost.Store(resp.(*automatorv1.WorkStatus).GetWorkId())
		}
		return resp, err
	}
	a := automatortest.Start(t, automatortest.Options{Interceptors: []grpc.UnaryServerInterceptor{loseAfterSubmit}})

	// A data directory whose serve is a: its address, CA and admin key.
	dir := initDir(t)
	if err := config.WriteServing(dir, config.Serving{GRPC: a.GRPCAddr, HTTP: a.GRPCAddr}); err != nil {
		t.Fatal(err)
	}
	for file, from := range map[string]string{config.FileAPIKey: a.APIKeyFile, config.FileCACert: a.CAFile} {
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	run := func(args ...string) (int, string, string) {
		lost.Store("")
		var out, errb bytes.Buffer
		code := Main(t.Context(), append([]string{"exec", "--account", a.Account}, append(args, "x.sh")...), Env{Stdout: &out, Stderr: &errb})
		id, _ := lost.Load().(string)
		if id == "" {
			t.Fatalf("exec %q queued nothing: exit %d, stderr %q", args, code, errb.String())
		}
		if code != ExitError || out.Len() != 0 || strings.Count(errb.String(), "\n") != 1 {
			t.Errorf("exec %q: exit %d, stdout %q, stderr %q; want exit %d, stdout empty, one line on stderr", args, code, out.String(), errb.String(), ExitError)
		}
		return code, id, errb.String()
	}

	_, id, msg := run("--data-dir", dir)
	for _, want := range []string{"work " + id + " was queued", "the database has lost it", "restored from a backup", "docs/backup.md", "synchronous", "docs/several-automators.md", "no proxy will claim it", "if the script must not run twice"} {
		if !strings.Contains(msg, want) {
			t.Errorf("exec --data-dir with its admin key, the unit lost: stderr %q does not say %q", msg, want)
		}
	}
	for _, not := range []string{"was queued and may still run", "an API key that may use its account"} {
		if strings.Contains(msg, not) {
			t.Errorf("exec --data-dir with its admin key, the unit lost: stderr %q says %q, which that key rules out", msg, not)
		}
	}

	for _, args := range [][]string{
		{"--data-dir", dir, "--api-key-file", a.APIKeyFile},
		{"--server", "https://" + a.GRPCAddr, "--api-key-file", a.APIKeyFile, "--ca", a.CAFile},
	} {
		_, id, msg := run(args...)
		if !strings.Contains(msg, "work "+id+" was queued and may still run") || !strings.Contains(msg, "with an API key that may use its account") {
			t.Errorf("exec %q, a key it cannot vouch for, NotFound after the submit: stderr %q; want the unit named as may still run for another key", args, msg)
		}
	}
}
