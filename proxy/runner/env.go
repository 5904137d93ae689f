package runner

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/opsgate/opsgate/internal/scriptenv"
)

// WorkIDVar is the variable that holds the unit's id in its script's
// environment, which the agent sets (Spec.Env). The reaper finds by it a
// script that the proxy started but had not registered when it died.
const WorkIDVar = "PROXY_WORK_ID"

// environ returns the script's environment: the variables of baseEnvKeys
// that the proxy has (or userEnv gives), then extra, which wins over a base variable of the same
// name. Nothing else of the proxy's environment is passed: it may hold
// secrets. Two names in extra for one variable (on windows, names that
// differ only in case) are refused: which value the script saw would depend
// on map order, and a command could set the proxy's PROXY_WORK_ID as
// proxy_work_id.
func environ(extra map[string]string) ([]string, error) {
	vars := make(map[string]string) // folded name -> "NAME=value"
	for _, k := range baseEnvKeys {
		v, ok := os.LookupEnv(k)
		if !ok {
			v, ok = userEnv()[k]
		}
		if ok {
			vars[foldEnvKey(k)] = k + "=" + v
		}
	}
	names := make(map[string]string, len(extra)) // folded name -> name in extra
	for k, v := range extra {
		if !scriptenv.ValidName(k) || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("%w: environment variable %q: names must be non-empty without '=' or NUL, values without NUL",
				ErrStart, k)
		}
		f := foldEnvKey(k)
		if err := scriptenv.Refused(k); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrStart, err)
		}
		if other, dup := names[f]; dup {
			return nil, fmt.Errorf("%w: environment variables %q and %q are one variable here (names are case-insensitive)",
				ErrStart, min(k, other), max(k, other))
		}
		names[f] = k
		vars[f] = k + "=" + v
	}
	env := make([]string, 0, len(vars))
	for _, kv := range vars {
		env = append(env, kv)
	}
	slices.Sort(env)
	return env, nil
}

// foldEnvNames: variable names are case-insensitive (windows). A variable
// so tests can set it on any OS.
var foldEnvNames = runtime.GOOS == "windows"

// foldEnvKey maps a variable name to its identity: names are
// case-insensitive on windows.
func foldEnvKey(k string) string {
	if foldEnvNames {
		return strings.ToUpper(k)
	}
	return k
}
