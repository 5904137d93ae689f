//go:build linux

package cli

import (
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

// TestServeWarnsOfARevealKeyThatNamesNoAPIKey: dashboard_reveal_keys holds
// API key ids; one that names no key (a typo) reveals nothing to anyone,
// so serve says so in its log as it starts, naming the id, and serves on.
// The ids that name keys are not warned of.
func TestServeWarnsOfARevealKeyThatNamesNoAPIKey(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	cfg := listenOnAnyPort(t, dir)
	cfg.DashboardRevealKeys = []string{"admin", "ak_typo"}
	if err := config.Save(dir, cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	log := &logtest.Buffer{}
	go func() { done <- Main(ctx, []string{"serve", "--data-dir", dir}, Env{Stdout: io.Discard, Stderr: log}) }()
	automatortest.WaitFor(t, 15*time.Second, "serve to write serving.yaml", func() bool {
		_, ok, _ := config.ReadServing(dir)
		return ok
	})
	cancel()
	if code := waittest.Recv(t, done, "serve to return after its context was cancelled"); code != 0 {
		t.Fatalf("serve exited %d:\n%s", code, log)
	}
	var warned []string
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, "dashboard_reveal_keys") {
			warned = append(warned, l)
		}
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "ak_typo") || !strings.Contains(warned[0], "level=WARN") {
		t.Fatalf("serve's log about dashboard_reveal_keys: %q; want one warning naming ak_typo\n%s", warned, log)
	}
}
