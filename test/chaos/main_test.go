//go:build linux

package chaos

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
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
	flag.Parse()
	code := m.Run()
	if bins.dir != "" {
		_ = os.RemoveAll(bins.dir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// bins are the automator and proxy binaries of this checkout, built once
// by the first test that needs them.
var bins struct {
	once             sync.Once
	dir              string
	automator, proxy string
	err              error
}

// binaries builds the binaries (set CHAOS_RACE=1 to build them with the
// race detector) and skips the test in -short mode.
func binaries(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the real binaries; skipped in -short mode")
	}
	bins.once.Do(func() {
		bins.dir, bins.err = os.MkdirTemp("", "opsgate-chaos-bin-")
		if bins.err != nil {
			return
		}
		args := []string{"build"}
		if os.Getenv("CHAOS_RACE") != "" {
			args = append(args, "-race")
		}
		args = append(args, "-o", bins.dir+string(filepath.Separator),
			"github.com/opsgate/opsgate/automator/cmd/automator",
			"github.com/opsgate/opsgate/proxy/cmd/proxy")
		start := time.Now()
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			bins.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			return
		}
		bins.automator = filepath.Join(bins.dir, "automator")
		bins.proxy = filepath.Join(bins.dir, "proxy")
		fmt.Fprintf(os.Stderr, "chaos: built the binaries in %v\n", time.Since(start).Round(time.Millisecond))
	})
	if bins.err != nil {
		t.Fatal(bins.err)
	}
}
