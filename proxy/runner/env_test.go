package runner

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestEnvironIsMinimalPlusExtra(t *testing.T) {
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
	t.Setenv("PATH", "/proxy/bin")
	env, err := environ(map[string]string{"PATH": "/script/bin"})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(env, "PATH=/proxy/bin") || !slices.Contains(env, "PATH=/script/bin") {
		t.Errorf("environment %q: want PATH=/script/bin only", env)
	}
}

func TestEnvironRefusesBadVariables(t *testing.T) {
	for _, extra := range []map[string]string{
		{"": "x"}, {"A=B": "x"}, {"A\x00": "x"}, {"A": "x\x00y"},
	} {
		if _, err := environ(extra); !errors.Is(err, ErrStart) {
			t.Errorf("environ(%q) = %v, want ErrStart", extra, err)
		}
	}
}
