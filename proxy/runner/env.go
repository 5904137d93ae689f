package runner

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
)

// environ returns the script's environment: the variables of baseEnvKeys
// that the proxy has, then extra, which wins over a base variable of the same
// name. Nothing else of the proxy's environment is passed: it may hold
// secrets.
func environ(extra map[string]string) ([]string, error) {
	vars := make(map[string]string) // folded name -> "NAME=value"
	for _, k := range baseEnvKeys {
		if v, ok := os.LookupEnv(k); ok {
			vars[foldEnvKey(k)] = k + "=" + v
		}
	}
	for k, v := range extra {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("%w: environment variable %q: names must be non-empty without '=' or NUL, values without NUL",
				ErrStart, k)
		}
		vars[foldEnvKey(k)] = k + "=" + v
	}
	env := make([]string, 0, len(vars))
	for _, kv := range vars {
		env = append(env, kv)
	}
	slices.Sort(env)
	return env, nil
}

// foldEnvKey maps a variable name to its identity: names are
// case-insensitive on windows.
func foldEnvKey(k string) string {
	if runtime.GOOS == "windows" {
		return strings.ToUpper(k)
	}
	return k
}
