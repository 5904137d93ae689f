//go:build linux

package chaos

import (
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/opsgate/opsgate/internal/proctest"
)

// Flags of the long run (`make chaos`); without -chaos.long the run is the
// short fixed-seed one `make test` runs.
var (
	flagLong     = flag.Bool("chaos.long", false, "run the long chaos run (random seed, several minutes) instead of the short one")
	flagSeed     = flag.Uint64("chaos.seed", 0, "seed of the fault schedule and the callers (0: fixed in the short run, random in the long one)")
	flagDuration = flag.Duration("chaos.duration", 0, "how long callers submit work (default 40s short, 6m long)")
	flagUnits    = flag.Int("chaos.units", 0, "keep submitting past the duration until this many units (default 20000 long; at most twice the duration)")
	flagCallers  = flag.Int("chaos.callers", 0, "concurrent callers (default 16 short, 32 long)")
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(soakHelperEnv); mode != "" {
		// This binary started as a helper process of the soak's tests.
		os.Exit(soakHelper(mode))
	}
	flag.Parse()
	code := m.Run()
	bins.Remove()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// bins are the automator and proxy binaries of this checkout, found or
// built once by the first test that needs them.
var (
	binsOnce sync.Once
	bins     proctest.Bins
	binsErr  error
)

// binaries finds or builds the binaries (proctest.Binaries: prebuilt when
// OPSGATE_TEST_BIN names them; set CHAOS_RACE=1 for race-built ones) and
// skips the test in -short mode.
func binaries(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the real binaries; skipped in -short mode")
	}
	binsOnce.Do(func() {
		start := time.Now()
		bins, binsErr = proctest.Binaries("", "opsgate-chaos-bin-", os.Getenv("CHAOS_RACE") != "")
		if binsErr == nil && os.Getenv(proctest.EnvBin) == "" {
			fmt.Fprintf(os.Stderr, "chaos: built the binaries in %v\n", time.Since(start).Round(time.Millisecond))
		}
	})
	if binsErr != nil {
		t.Fatal(binsErr)
	}
}
