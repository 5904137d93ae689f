package agent

import (
	"bytes"
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/runner"
)

// TestAllowedEnvNarrowsWhatACommandMaySet: a proxy with allowed_env runs a
// command whose variables it lists (by name, by a NAME_* prefix, or all
// with "*"), and fails one that sets another, naming it, without starting
// anything: the operator's lock on what callers may hand its scripts, past
// the variables refused everywhere, which cannot be complete. Without
// allowed_env a command may set none (a review: zip ran a command from a
// ZIPOPT, make's built-in rules one from a CC).
func TestAllowedEnvNarrowsWhatACommandMaySet(t *testing.T) {
	t.Parallel()
	list := []string{"DEPLOY_TARGET", "TAR_FILE", "APP_*"}
	for _, tc := range []struct {
		name    string
		allowed []string
		env     map[string]string
		runs    bool
		reason  string
	}{
		{"listed", list, map[string]string{"DEPLOY_TARGET": "web-1", "APP_MODE": "blue"}, true, ""},
		{"none", list, nil, true, ""},
		{"not listed", list, map[string]string{"DEPLOY_TARGET": "web-1", "TAR_FILE": "x", "OTHER": "y"}, false,
			`environment variable "OTHER" is refused: instance a's allowed_env does not list it; nothing ran`},
		{"the prefix itself", list, map[string]string{"APP": "x"}, false,
			`environment variable "APP" is refused: instance a's allowed_env does not list it; nothing ran`},
		{"no allowed_env", nil, map[string]string{"ZIPOPT": "-T -TT=id"}, false,
			`environment variable "ZIPOPT" is refused: instance a's config has no allowed_env, the only variables a command may set for its scripts (allowed_env: [ZIPOPT] lets it); nothing ran`},
		{"no allowed_env, no variable", nil, nil, true, ""},
		{"any", []string{"*"}, map[string]string{"OTHER": "y", "ENV": "production"}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var started atomic.Int32
			var got map[string]string
			useRunner(t, func(_ context.Context, s runner.Spec) (runner.Result, error) {
				started.Add(1)
				got = s.Env
				return runner.Result{}, nil
			})
			f := newFake()
			a := New(Options{
				tune:   testTuning(t),
				Client: f, Keys: crypto.Keys{testKey}, InstanceID: "a", ScriptsDir: t.TempDir(),
				MaxConcurrency: 1, PollWait: time.Second, GracePeriod: 5 * time.Second,
				BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
				AllowedEnv: tc.allowed,
				Logger:     slog.New(slog.NewTextHandler(&lockedWriter{b: &bytes.Buffer{}}, nil)),
			})
			runInBackground(t, a)
			f.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{claim(t, "w1", &automatorv1.Command{Script: "s.sh", Env: tc.env})}}
			done := waittest.Recv(t, f.completed, "the unit's result to be posted")
			plain, err := crypto.Open(crypto.Keys{testKey}, "acme", "w1", crypto.DirResult, done.GetSealedResult())
			if err != nil {
				t.Fatal(err)
			}
			var r automatorv1.Result
			if err := proto.Unmarshal(plain, &r); err != nil {
				t.Fatal(err)
			}
			if !tc.runs {
				if started.Load() != 0 || done.GetOutcome() != automatorv1.Outcome_OUTCOME_FAILED || r.GetFailure() != tc.reason {
					t.Errorf("env %v: started %d times, %v %q; want nothing started, failed: %q", tc.env, started.Load(), done.GetOutcome(), r.GetFailure(), tc.reason)
				}
				return
			}
			if started.Load() != 1 || done.GetOutcome() != automatorv1.Outcome_OUTCOME_SUCCEEDED {
				t.Fatalf("env %v: started %d times, %v %q; want it run", tc.env, started.Load(), done.GetOutcome(), r.GetFailure())
			}
			for k, v := range tc.env {
				if got[k] != v {
					t.Errorf("the script's %s = %q, want %q", k, got[k], v)
				}
			}
			if got["PROXY_WORK_ID"] != "w1" {
				t.Errorf("the script's PROXY_WORK_ID = %q: the proxy's own variables are always set", got["PROXY_WORK_ID"])
			}
		})
	}
}
