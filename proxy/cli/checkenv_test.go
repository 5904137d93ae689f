package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckEnvLineNamesTheShellsSettingsAndTheServiceFile: status's
// automator check dials with the shell's web-proxy variables (HTTPS_PROXY,
// NO_PROXY), not the service's, which come from its environment file: the
// line says which it used, with any password in them hidden, and what the
// service's file sets, so a check that reached the automator through the
// shell's proxy is not taken for the service's way out.
func TestCheckEnvLineNamesTheShellsSettingsAndTheServiceFile(t *testing.T) {
	dir := t.TempDir()
	envFile := filepath.Join(dir, "proxy")
	shell := map[string]string{"HTTPS_PROXY": "http://alice:secret@shellproxy.example:3128"}
	getenv := func(k string) string { return shell[k] }

	if err := os.WriteFile(envFile, []byte("# the way out\nexport https_proxy=\"http://webproxy.example:3128\"\nNO_PROXY=.corp.example\nTZ=UTC\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	line := checkEnvLine(getenv, envFile)
	for _, want := range []string{"this shell's", "HTTPS_PROXY=http://xxxxx@shellproxy.example:3128", "NO_PROXY not set", "not the service's", envFile, "sets https_proxy, NO_PROXY"} {
		if !strings.Contains(line, want) {
			t.Errorf("check env = %q, want it to say %q", line, want)
		}
	}
	if strings.Contains(line, "secret") || strings.Contains(line, "TZ") {
		t.Errorf("check env = %q: it shows the proxy's password or a variable that is no web proxy's", line)
	}

	if err := os.WriteFile(envFile, []byte("TZ=UTC\nHTTPS_PROXY=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if line := checkEnvLine(getenv, envFile); !strings.Contains(line, "sets no HTTPS_PROXY or NO_PROXY, so it uses no web proxy") {
		t.Errorf("check env with a file setting no proxy = %q", line)
	}

	delete(shell, "HTTPS_PROXY")
	missing := filepath.Join(dir, "none")
	if line := checkEnvLine(getenv, missing); !strings.Contains(line, "this shell's (no HTTPS_PROXY: direct)") || !strings.Contains(line, missing+", which does not exist, so it uses no web proxy") {
		t.Errorf("check env with no proxy anywhere = %q", line)
	}

	if line := checkEnvLine(getenv, ""); !strings.Contains(line, "not the service's, which is its own") {
		t.Errorf("check env of a service with no environment file (Windows) = %q", line)
	}
}
