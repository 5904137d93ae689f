//go:build linux

package cli_test

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/cli"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestExecRefusedWhileItWaitsSaysItsUnitWasQueued: exec's API key revoked
// once its unit is queued (here right after the submit is answered; a
// replica killed under a wait, its wait resumed on another after the
// revoke, is refused alike) exits 255 saying why, and, since the unit
// still runs, names it as queued and may still run, with how to follow it
// with another key; the unit is indeed still queued.
func TestExecRefusedWhileItWaitsSaysItsUnitWasQueued(t *testing.T) {
	t.Parallel()
	var a atomic.Pointer[automatortest.Automator]
	var queued atomic.Value // the unit's id
	revokeOnSubmit := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		if info.FullMethod == automatorv1.AutomatorService_Submit_FullMethodName && err == nil {
			queued.Store(resp.(*automatorv1.WorkStatus).GetWorkId())
			if _, err := a.Load().Store.APIKeyRevoke(context.Background(), store.APIKeyRevokeParams{ID: "admin", Now: time.Now()}); err != nil {
				t.Error(err)
			}
		}
		return resp, err
	}
	a.Store(automatortest.Start(t, automatortest.Options{Interceptors: []grpc.UnaryServerInterceptor{revokeOnSubmit}}))
	at := a.Load()

	var out, errb bytes.Buffer
	code := cli.Main(t.Context(), []string{"exec", "--server", at.URL(), "--api-key-file", at.APIKeyFile, "--ca", at.CAFile,
		"--account", at.Account, "x.sh"}, cli.Env{Stdout: &out, Stderr: &errb})
	id, _ := queued.Load().(string)
	if id == "" {
		t.Fatalf("no unit was queued; exit %d, stderr %q", code, errb.String())
	}
	msg := errb.String()
	for _, want := range []string{"revoked", "work " + id + " was queued and may still run", "automator work wait " + id, "with an API key the automator accepts"} {
		if !strings.Contains(msg, want) {
			t.Errorf("stderr %q: want it to say %q", msg, want)
		}
	}
	if code != cli.ExitError || strings.Count(msg, "\n") != 1 {
		t.Errorf("exit %d, stderr %q; want %d and one line", code, msg, cli.ExitError)
	}
	if w, err := at.Store.WorkGet(t.Context(), id); err != nil || w.State != store.StateQueued {
		t.Errorf("unit %s after exec gave up: %s, %v; want it still queued, as the message says", id, w.State, err)
	}

	// With a key the automator accepts put in the key file, the cancel
	// the message names runs as printed: it carries exec's --server,
	// --api-key-file and --ca (it once named none, and was refused).
	key, err := crypto.NewToken("oak_")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := at.Store.APIKeyCreate(t.Context(), store.APIKeyCreateParams{ID: "admin2", Hash: crypto.HashToken(key), Name: "again", Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(at.APIKeyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("end it with `automator ([^`]*)`").FindStringSubmatch(msg)
	if m == nil {
		t.Fatalf("stderr %q names no cancel to run", msg)
	}
	var cout, cerr bytes.Buffer
	if code := cli.Main(t.Context(), strings.Fields(m[1]), cli.Env{Stdout: &cout, Stderr: &cerr}); code != 0 {
		t.Errorf("`automator %s`, run as printed: exit %d: %s", m[1], code, cerr.String())
	}
	if w, err := at.Store.WorkGet(t.Context(), id); err != nil || w.State != store.StateCancelled {
		t.Errorf("unit %s after the printed cancel: %s, %v; want it cancelled", id, w.State, err)
	}
}
