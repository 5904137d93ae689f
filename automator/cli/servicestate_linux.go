package cli

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/opsgate/opsgate/internal/clihelp"
	"github.com/opsgate/opsgate/proxy/service"
)

// serviceServe finds the process of `automator --service NAME serve` among
// the host's processes, and its data directory. pid is 0 when none runs.
func serviceServe(name string) (pid int, dir string, ok bool) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, "", false
	}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == os.Getpid() {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimSuffix(string(data), "\x00"), "\x00")
		if len(args) < 2 {
			continue
		}
		got, rest, isService, _ := service.SplitServiceFlag(args[1:])
		if !isService || got != name || rest[0] != "serve" {
			continue
		}
		if d, _ := clihelp.FlagValue(rest[1:], "data-dir"); d != "" {
			return p, d, true
		}
	}
	return 0, "", true
}
