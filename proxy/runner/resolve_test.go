package runner

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestResolveScriptRefusesNamesThatAreNotPlainFileNames(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, name := range []string{".hidden.sh", "deploy.sh~"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Each name with the reason its refusal gives: an operator reads what
	// is wrong with the name, not only that it is.
	for name, reason := range map[string]string{
		"": "empty", ".": "names a directory", "..": "names a directory",
		"../x": "path separator", "a/b": "path separator", "/bin/sh": "absolute path", `a\b`: "path separator",
		`\x`: "absolute path", `..\x`: "path separator", `C:\x`: "path separator", "C:x": "':'", "x:stream": "':'",
		"a\x00b": "control character", "a\nb": "control character", "\tx": "control character", "x\x7f": "control character",
		"x\u0085": "control character", "\xff": "not valid UTF-8", "-rf": "starts with '-'", strings.Repeat("a", 256): "longer than 255 bytes",
		"ech\u200bo.sh": "invisible, format or separator character", "\u202eecho.sh": "invisible, format or separator character", "a\u00a0b.sh": "invisible, format or separator character",
		// Runnable files, but no deployed scripts: a hidden file, an
		// editor's backup (which keeps the script's mode).
		".hidden.sh": "starts with '.' (a hidden file)", "deploy.sh~": "ends in '~' (an editor's backup)",
	} {
		_, err := ResolveScript(dir, name)
		if !errors.Is(err, ErrBadScriptName) {
			t.Errorf("ResolveScript(%q) = %v, want ErrBadScriptName", name, err)
			continue
		}
		if !strings.Contains(err.Error(), strconv.Quote(name)) {
			t.Errorf("error %q does not name the script %q", err, name)
		}
		if !strings.Contains(err.Error(), reason) {
			t.Errorf("ResolveScript(%q) = %q, want the reason %q", name, err, reason)
		}
	}
}

func TestResolveScriptWithoutScriptsDir(t *testing.T) {
	t.Parallel()
	if _, err := ResolveScript("", "x"); !errors.Is(err, ErrUnknownScript) {
		t.Errorf("empty scripts dir: %v, want ErrUnknownScript", err)
	}
	missing := t.TempDir() + "/missing"
	if _, err := ResolveScript(missing, "x"); !errors.Is(err, ErrUnknownScript) {
		t.Errorf("missing scripts dir: %v, want ErrUnknownScript", err)
	}
}

func TestResolveScriptUnknown(t *testing.T) {
	t.Parallel()
	_, err := ResolveScript(t.TempDir(), "nope.sh")
	if !errors.Is(err, ErrUnknownScript) {
		t.Fatalf("got %v, want ErrUnknownScript", err)
	}
	if !strings.Contains(err.Error(), `"nope.sh"`) {
		t.Errorf("error %q does not name the script", err)
	}
}

func TestWithin(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path string
		want bool
	}{
		{"/s", true}, {"/s/x", true}, {"/s/d/x", true}, {"/s/..x", true},
		{"/", false}, {"/sx", false}, {"/t/x", false}, {"/s/../x", false},
	} {
		if got := within("/s", tc.path); got != tc.want {
			t.Errorf("within(/s, %q) = %v, want %v", tc.path, got, tc.want)
		}
	}
}

// TestResolveScriptRefusesNamesWindowsGivesAMeaningOfItsOwn: on windows a
// device name, with or without an extension, opens the device, and a
// trailing dot or space is dropped, so the name does not mean the file in
// the scripts directory. Each is refused as a bad name, even where such a
// file exists; names merely like them are scripts as usual.
func TestResolveScriptRefusesNamesWindowsGivesAMeaningOfItsOwn(t *testing.T) {
	// Not parallel: it sets windowsNames, which every resolve reads.
	old := windowsNames
	windowsNames = true
	t.Cleanup(func() { windowsNames = old })
	dir := t.TempDir()
	for name, reason := range map[string]string{
		"CON": "device name", "con.ps1": "device name", "Nul.bat": "device name", "aux.tar.cmd": "device name",
		"PRN .ps1": "device name", "com1.exe": "device name", "LPT9.ps1": "device name", "com0": "device name",
		"COM\u00b9.ps1": "device name", "conin$.cmd": "device name", "CONOUT$": "device name",
		"x.ps1.": "ends in '.' or ' '", "x.ps1 ": "ends in '.' or ' '", "x.bat. .": "ends in '.' or ' '",
		"a*.ps1": "does not allow", "a?.ps1": "does not allow", "a<b.ps1": "does not allow", "a|b.ps1": "does not allow", `a".ps1`: "does not allow",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		_, err := ResolveScript(dir, name)
		if !errors.Is(err, ErrBadScriptName) || !strings.Contains(err.Error(), reason) {
			t.Errorf("ResolveScript(%q) = %v, want ErrBadScriptName saying %q", name, err, reason)
		}
	}
	for _, name := range []string{"console.ps1", "nul1.ps1", "com10.ps1", "auxiliary.cmd", "lpt.bat", "my.con.ps1", "com.ps1"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := ResolveScript(dir, name); err != nil {
			t.Errorf("ResolveScript(%q) = %v, want it resolved", name, err)
		}
	}
}
