// Package deps checks the direction of dependencies, the way Tailscale's
// tstest/deptest does: the architecture is a fact the build enforces.
package deps

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/opsgate/opsgate"

// deps lists the packages pkg depends on (non-test), for a GOOS.
func deps(t *testing.T, goos, pkg string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg)
	cmd.Env = append(cmd.Environ(), "GOOS="+goos)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s (GOOS=%s): %v", pkg, goos, err)
	}
	return strings.Fields(string(out))
}

func isStd(p string) bool {
	first, _, _ := strings.Cut(p, "/")
	return !strings.Contains(first, ".")
}

// TestCryptoUsesOnlyStdAndXCrypto: the sealing code can be audited alone.
// internal/secretfile (how the master key file is decoded, whatever a
// Windows editor saved it as) is the one package of the module it may use,
// with internal/winacl, through which secretfile reads a Windows file's
// access list: their own dependencies are listed here too, so they must
// be std (and x/sys).
func TestCryptoUsesOnlyStdAndXCrypto(t *testing.T) {
	for _, goos := range []string{"linux", "windows"} {
		for _, d := range deps(t, goos, module+"/crypto") {
			if isStd(d) || d == module+"/crypto" || d == module+"/internal/secretfile" || d == module+"/internal/winacl" || strings.HasPrefix(d, "golang.org/x/crypto/") || strings.HasPrefix(d, "golang.org/x/sys/") {
				continue
			}
			t.Errorf("GOOS=%s: crypto depends on %s", goos, d)
		}
	}
}

// TestProxyNeverImportsTheStore: the agent installed in customer networks
// carries no database code.
func TestProxyNeverImportsTheStore(t *testing.T) {
	forbidden := []string{
		module + "/automator/store",
		module + "/automator/server",
		"github.com/jackc/pgx",
		"modernc.org/sqlite",
		"database/sql",
	}
	for _, goos := range []string{"linux", "windows"} {
		for _, d := range deps(t, goos, module+"/proxy/cmd/proxy") {
			for _, f := range forbidden {
				if d == f || strings.HasPrefix(d, f+"/") {
					t.Errorf("GOOS=%s: proxy depends on %s", goos, d)
				}
			}
		}
	}
}

// TestRunnerStandsAlone: the script runner imports nothing else of ours
// but four leaves: the list of environment variables a command may not
// set and the rules of a script's name, which the automator checks too,
// the characters shown as they are, which script names and instance ids
// are held to, and Windows's device names, which service names are
// checked against too. They import the standard library, and each other.
func TestRunnerStandsAlone(t *testing.T) {
	self := module + "/proxy/runner"
	shared := []string{module + "/internal/scriptenv", module + "/internal/scriptname", module + "/internal/printable", module + "/internal/winname"}
	for _, goos := range []string{"linux", "windows"} {
		for _, d := range deps(t, goos, self) {
			if strings.HasPrefix(d, module+"/") && d != self && !slices.Contains(shared, d) {
				t.Errorf("GOOS=%s: proxy/runner depends on %s", goos, d)
			}
		}
		for _, leaf := range shared {
			for _, d := range deps(t, goos, leaf) {
				if !isStd(d) && !slices.Contains(shared, d) {
					t.Errorf("GOOS=%s: %s, which proxy/runner imports, depends on %s", goos, leaf, d)
				}
			}
		}
	}
}

// TestStoreTypesImportNothingOfOurs: the shared types package is a leaf.
func TestStoreTypesImportNothingOfOurs(t *testing.T) {
	self := module + "/automator/store"
	for _, d := range deps(t, "linux", self) {
		if strings.HasPrefix(d, module+"/") && d != self {
			t.Errorf("automator/store depends on %s", d)
		}
	}
}

// TestNothingOfOursImportsTheTestHarness: internal/proctest, the process
// tests' harness, internal/waittest, the tests' bounded waits,
// internal/readmetest, the config tests' README check, internal/logtest,
// the service log tests' checks, internal/pidtest, the tests' check that
// a process ended, internal/closedport, the tests' refused addresses,
// internal/delayline, the tests' link with a long round trip,
// internal/testparallel, the tests' raised -test.parallel, and
// internal/socktest, the tests' reads of TCP options, are for
// tests only; no package of automator/ or proxy/ (their tests aside)
// depends on them.
func TestNothingOfOursImportsTheTestHarness(t *testing.T) {
	harnesses := []string{module + "/internal/proctest", module + "/internal/waittest", module + "/internal/readmetest", module + "/internal/logtest", module + "/internal/pidtest", module + "/internal/closedport", module + "/internal/delayline", module + "/internal/testparallel", module + "/internal/socktest"}
	for _, goos := range []string{"linux", "windows"} {
		for _, tree := range []string{module + "/automator/...", module + "/proxy/..."} {
			for _, d := range deps(t, goos, tree) {
				if slices.Contains(harnesses, d) {
					t.Errorf("GOOS=%s: a package of %s depends on %s", goos, tree, d)
				}
			}
		}
	}
}

// TestTestHarnessesBuildOnEveryUnix: the tests' own helpers built for
// "unix" (internal/closedport, internal/pidtest) compile, with their tests,
// on the Unix systems other than Linux that the proxy runs on too, where
// package syscall lacks some of Linux's names (SOCK_CLOEXEC on macOS).
func TestTestHarnessesBuildOnEveryUnix(t *testing.T) {
	for _, goos := range []string{"darwin", "freebsd"} {
		cmd := exec.Command("go", "vet", module+"/internal/closedport", module+"/internal/pidtest")
		cmd.Env = append(cmd.Environ(), "GOOS="+goos)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("GOOS=%s go vet of the test harnesses: %v\n%s", goos, err, out)
		}
	}
}
