package runner

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// This test binary is the reaper's binary in tests, as the proxy's is
	// in production: it serves ReaperEnv before anything else.
	if os.Getenv(ReaperEnv) == "1" {
		os.Exit(ServeReaper(os.Stdin, os.Stderr))
	}
	if dir := os.Getenv(proxyChildEnv); dir != "" {
		os.Exit(runAsProxy(dir)) // a child of TestScriptsOfAProxyKilledWithSIGKILLAreKilled
	}
	goleak.VerifyTestMain(m)
}
