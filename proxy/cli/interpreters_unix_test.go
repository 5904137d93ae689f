//go:build !windows

package cli

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestMissingInterpretersListsScriptsThisHostCannotRun: a script whose #!
// line names an interpreter this host does not have, or one saved with
// Windows line endings, is listed with it, so the proxy warns as it starts
// and status says so (a review: a standby missing python looked healthy);
// one whose interpreter exists, or is found through PATH, is not.
func TestMissingInterpretersListsScriptsThisHostCannotRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"ok.sh":      "#!/bin/sh\necho ok\n",
		"env.sh":     "#!/usr/bin/env nonexistent-python9\nprint(1)\n",
		"py.sh":      "#!/usr/bin/nonexistent-python9\nprint(1)\n",
		"crlf.sh":    "#!/bin/sh\r\necho ok\r\n",
		"notes.txt":  "#!/nowhere\n", // not runnable: not listed
		"nobang.bin": "\x7fELF",
	} {
		mode := os.FileMode(0o755)
		if name == "notes.txt" {
			mode = 0o644
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	got := missingInterpreters(dir)
	want := []string{`crlf.sh (#!/bin/sh\r)`, "py.sh (#!/usr/bin/nonexistent-python9)"}
	if !slices.Equal(got, want) {
		t.Errorf("missingInterpreters = %q, want %q", got, want)
	}
}
