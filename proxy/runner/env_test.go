package runner

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestEnvironIsMinimalPlusExtra(t *testing.T) {
	// Not parallel: it sets this process's environment (t.Setenv).
	t.Setenv("SECRET_X", "y")
	t.Setenv("PATH", "/test/bin")
	env, err := environ(map[string]string{"PROXY_WORK_ID": "w-1", "PROXY_ACCOUNT": "acme"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"PATH=/test/bin", "PROXY_WORK_ID=w-1", "PROXY_ACCOUNT=acme"} {
		if !slices.Contains(env, want) {
			t.Errorf("environment %q lacks %q", env, want)
		}
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "SECRET_X=") {
			t.Errorf("environment passes the proxy's secret: %q", kv)
		}
	}
}

func TestEnvironExtraOverridesBase(t *testing.T) {
	// Not parallel: it sets this process's environment (t.Setenv).
	t.Setenv("LANG", "C.UTF-8")
	env, err := environ(map[string]string{"LANG": "de_DE.UTF-8"})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(env, "LANG=C.UTF-8") || !slices.Contains(env, "LANG=de_DE.UTF-8") {
		t.Errorf("environment %q: want LANG=de_DE.UTF-8 only", env)
	}
}

func TestEnvironRefusesBadVariables(t *testing.T) {
	t.Parallel()
	for _, extra := range []map[string]string{
		{"": "x"}, {"A=B": "x"}, {"A\x00": "x"}, {"A": "x\x00y"},
	} {
		if _, err := environ(extra); !errors.Is(err, ErrStart) {
			t.Errorf("environ(%q) = %v, want ErrStart", extra, err)
		}
	}
}

// TestEnvironRefusesTwoNamesOfOneVariable: where names are case-insensitive
// (windows), a command's "proxy_work_id" and the proxy's PROXY_WORK_ID are
// one variable. Which of the two the script saw used to depend on map
// order, so a caller could forge the work id; now the run is refused,
// naming both.
func TestEnvironRefusesTwoNamesOfOneVariable(t *testing.T) {
	// Not parallel: it sets this process's environment (t.Setenv) and
	// foldEnvNames.
	old := foldEnvNames
	foldEnvNames = true
	t.Cleanup(func() { foldEnvNames = old })
	for range 20 { // map order differs from run to run
		env, err := environ(map[string]string{"PROXY_WORK_ID": "w-1", "proxy_work_id": "forged"})
		if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), `"PROXY_WORK_ID"`) || !strings.Contains(err.Error(), `"proxy_work_id"`) {
			t.Fatalf("environ with PROXY_WORK_ID and proxy_work_id, names case-insensitive: %q, %v; want ErrStart naming both", env, err)
		}
	}
	// A command's variable still replaces a base variable of any case.
	t.Setenv("TMPDIR", "/proxy/tmp")
	env, err := environ(map[string]string{"TmpDir": "/script/tmp"})
	if err != nil || slices.Contains(env, "TMPDIR=/proxy/tmp") || !slices.Contains(env, "TmpDir=/script/tmp") {
		t.Errorf("environ with TmpDir, names case-insensitive: %q, %v; want TmpDir=/script/tmp only", env, err)
	}
}
