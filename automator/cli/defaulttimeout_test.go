//go:build linux

package cli

import (
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/automator/config"
)

// TestServeGivesUnitsTheConfiguredDefaultTimeout: default_timeout in
// automator.yaml is the timeout of a unit whose caller gives none.
func TestServeGivesUnitsTheConfiguredDefaultTimeout(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultTimeout = 7 * time.Minute
	if err := config.Save(dir, cfg); err != nil {
		t.Fatal(err)
	}
	s := serveDirInProcess(t, dir)
	s.account(t, "acme")
	w, err := s.client(t).Submit(t.Context(), "acme", client.Command{Script: "x.sh"})
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Deadline.Sub(w.QueuedAt); got != 7*time.Minute {
		t.Errorf("deadline - queued_at = %v, want the 7m of default_timeout", got)
	}
}
