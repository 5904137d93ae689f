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
// secrets. Two names in extra for one variable (on windows, names that
// differ only in case) are refused: which value the script saw would depend
// on map order, and a command could set the proxy's PROXY_WORK_ID as
// proxy_work_id.
func environ(extra map[string]string) ([]string, error) {
	vars := make(map[string]string) // folded name -> "NAME=value"
	for _, k := range baseEnvKeys {
		if v, ok := os.LookupEnv(k); ok {
			vars[foldEnvKey(k)] = k + "=" + v
		}
	}
	names := make(map[string]string, len(extra)) // folded name -> name in extra
	for k, v := range extra {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("%w: environment variable %q: names must be non-empty without '=' or NUL, values without NUL",
				ErrStart, k)
		}
		f := foldEnvKey(k)
		if codeLoadingEnv(f) {
			return nil, fmt.Errorf("%w: environment variable %q is refused: it can make a shell, an interpreter or the dynamic loader run code that is not the deployed script",
				ErrStart, k)
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

// codeLoadingNames and codeLoadingPrefixes name the variables a command
// may not set (compared as foldEnvKey folds them): each makes a shell, an
// interpreter or the dynamic loader run code the command supplies or
// chooses (BASH_ENV=/dev/stdin runs the command's stdin), so a command
// could run more than a deployed script with an argument vector.
var (
	codeLoadingNames = map[string]bool{
		"BASH_ENV": true, "ENV": true, "SHELLOPTS": true, "BASHOPTS": true, "PS4": true,
		"PERL5OPT": true, "PERL5LIB": true, "PERLLIB": true, "PERL5DB": true,
		"PYTHONSTARTUP": true, "PYTHONPATH": true, "PYTHONHOME": true,
		"NODE_OPTIONS": true, "NODE_PATH": true, "RUBYOPT": true, "RUBYLIB": true,
		"GCONV_PATH": true,
	}
	codeLoadingPrefixes = []string{"BASH_FUNC_", "LD_", "DYLD_"}
)

// codeLoadingEnv reports whether the folded variable name f is one a
// command may not set.
func codeLoadingEnv(f string) bool {
	if codeLoadingNames[f] {
		return true
	}
	for _, p := range codeLoadingPrefixes {
		if strings.HasPrefix(f, p) {
			return true
		}
	}
	return false
}
