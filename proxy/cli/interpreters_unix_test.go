//go:build !windows

package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestMissingInterpretersListsScriptsThisHostCannotRun: a script whose #!
// line names an interpreter this host does not have is listed with it, and
// one saved with Windows line endings (a carriage return after the
// interpreter or after its argument) with its line, each kind under its
// own warning, so the proxy warns as it starts and status says so (a
// review: a standby missing python looked healthy); one whose interpreter
// exists, or is found through PATH, is not. A "#!/usr/bin/env NAME" whose
// NAME is in no directory of PATH is listed by the running proxy, which
// looks it up, and one giving env NAME and an option, which on Linux env
// takes for one name, by both. (Not parallel: it sets PATH.)
func TestMissingInterpretersListsScriptsThisHostCannotRun(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"ok.sh":      "#!/bin/sh\necho ok\n",
		"env.sh":     "#!/usr/bin/env nonexistent-python9\nprint(1)\n",
		"py.sh":      "#!/usr/bin/nonexistent-python9\nprint(1)\n",
		"through.sh": "#!/bin/sh/x\n", // a path through a file
		"crlf.sh":    "#!/bin/sh\r\necho ok\r\n",
		"crlfenv.py": "#!/usr/bin/env python3\r\nprint(1)\r\n", // env looks for "python3\r"
		"crlfarg.sh": "#!/bin/sh -e\r\necho ok\r\n",
		"notes.txt":  "#!/nowhere\n", // not runnable: not listed
		"nobang.bin": "\x7fELF",
		"envsh.sh":   "#!/usr/bin/env sh\necho ok\n",
		"envarg.sh":  "#!/usr/bin/env sh -e \necho ok\n", // env looks for "sh -e" (Linux)
		"envS.sh":    "#!/usr/bin/env -S sh -e\necho ok\n",
		// On Linux one argument: a variable, and the script run again by
		// env forever; an option env refuses (a re-review).
		"envvar.sh":  "#!/usr/bin/env LC_ALL=C sh\necho ok\n",
		"envvar1.sh": "#!/usr/bin/env FOO=1\necho ok\n",
		"envi.sh":    "#!/usr/bin/env -i sh\necho ok\n",
		// Missing: after -S, the program env splits out; a path.
		"envSmissing.sh": "#!/usr/bin/env -S nonexistent-python9 -u\nprint(1)\n",
		"envpath.sh":     "#!/usr/bin/env /nonexistent/python9\nprint(1)\n",
	} {
		mode := os.FileMode(0o755)
		if name == "notes.txt" {
			mode = 0o644
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	crlf := scriptTrouble{crlfWarning, []string{"crlf.sh (#!/bin/sh)", "crlfarg.sh (#!/bin/sh -e)", "crlfenv.py (#!/usr/bin/env python3)"}}
	var envOneArg []scriptTrouble
	if runtime.GOOS == "linux" {
		envOneArg = []scriptTrouble{{envOneArgWarning, []string{"envarg.sh (#!/usr/bin/env sh -e)", "envi.sh (#!/usr/bin/env -i sh)",
			"envvar.sh (#!/usr/bin/env LC_ALL=C sh)", "envvar1.sh (#!/usr/bin/env FOO=1)"}}}
	}
	equal := func(a, b scriptTrouble) bool { return a.warning == b.warning && slices.Equal(a.scripts, b.scripts) }
	// As status lists them: a name env looks up is not looked up, this
	// shell's PATH not being the service's.
	envPath := "envpath.sh (#!/usr/bin/env /nonexistent/python9: /nonexistent/python9 does not exist)"
	want := append([]scriptTrouble{
		{missingInterpretersWarning, []string{envPath, "py.sh (#!/usr/bin/nonexistent-python9)", "through.sh (#!/bin/sh/x)"}},
		// Listed on their own, saying what to do (a review).
		crlf,
	}, envOneArg...)
	if got := unrunnable(dir, false); !slices.EqualFunc(got, want, equal) {
		t.Errorf("unrunnable, PATH not looked up = %q,\nwant %q", got, want)
	}
	// As the running proxy lists them: in its PATH, which its scripts get,
	// env finds sh and not nonexistent-python9.
	t.Setenv("PATH", "/usr/bin:/bin")
	want = append([]scriptTrouble{
		{missingInterpretersWarning, []string{"env.sh (#!/usr/bin/env nonexistent-python9: nonexistent-python9 is in no directory of the proxy's PATH)",
			"envSmissing.sh (#!/usr/bin/env -S nonexistent-python9 -u: nonexistent-python9 is in no directory of the proxy's PATH)",
			envPath, "py.sh (#!/usr/bin/nonexistent-python9)", "through.sh (#!/bin/sh/x)"}},
		crlf,
	}, envOneArg...)
	if got := unrunnable(dir, true); !slices.EqualFunc(got, want, equal) {
		t.Errorf("unrunnable, PATH looked up = %q,\nwant %q", got, want)
	}
}

// TestAWarningNamesAtMost20Scripts: the rest are counted, so that a
// directory of thousands of broken scripts does not write a line journald
// and syslog cut (a re-review: 149 KB).
func TestAWarningNamesAtMost20Scripts(t *testing.T) {
	t.Parallel()
	var items []string
	for i := range 25 {
		items = append(items, fmt.Sprintf("s%02d.sh (#!/x)", i))
	}
	got := listed(items)
	if !strings.HasPrefix(got, "s00.sh (#!/x); s01.sh (#!/x)") || !strings.HasSuffix(got, "s19.sh (#!/x); and 5 more") || strings.Contains(got, "s20.sh") {
		t.Errorf("listed(25 items) = %q; want the first 20, then \"and 5 more\"", got)
	}
	if got := listed(items[:2]); got != "s00.sh (#!/x); s01.sh (#!/x)" {
		t.Errorf("listed(2 items) = %q; want both, joined", got)
	}
}
