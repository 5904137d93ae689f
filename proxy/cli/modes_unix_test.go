//go:build !windows

package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opsgate/opsgate/crypto"
)

// startStopped writes a valid config (mode 0600) whose scripts_dir is
// scripts, and returns it with a function that runs `proxy run` on it,
// its agent started only to stop, and returns its log.
func startStopped(t *testing.T, scripts string) (path string, run func() string) {
	t.Helper()
	key, err := crypto.NewKey(1)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(path, []byte("automator_url: http://127.0.0.1:1\ntoken: opt_x\nkey: "+key.String()+"\nscripts_dir: '"+scripts+"'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	return path, func() string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := Main(ctx, []string{"run", "--config", path}, Env{Stdout: &stdout, Stderr: &stderr}); code != 0 {
			t.Fatalf("proxy run: exit %d, %s", code, stderr.String())
		}
		return stderr.String()
	}
}

// TestRunWarnsOfAScriptsDirOthersMayWrite: a scripts directory every user
// may write to is not refused (the operator may mean it), but `proxy run`
// says at start, at WARN, that others may change what it runs, naming the
// directory; a tidy one gets no such line.
func TestRunWarnsOfAScriptsDirOthersMayWrite(t *testing.T) {
	t.Parallel()
	scripts := filepath.Join(t.TempDir(), "scripts")
	if err := os.Mkdir(scripts, 0o755); err != nil {
		t.Fatal(err)
	}
	_, run := startStopped(t, scripts)
	if log := run(); strings.Contains(log, "may change what this proxy runs") {
		t.Errorf("a tidy scripts directory: the log warns of it:\n%s", log)
	}
	if err := os.Chmod(scripts, 0o777); err != nil {
		t.Fatal(err)
	}
	if log := run(); !strings.Contains(log, "level=WARN msg=\"users other than the scripts' owners may change what this proxy runs") ||
		!strings.Contains(log, scripts+": writable by every user") {
		t.Errorf("a scripts directory every user may write: want a WARN naming it:\n%s", log)
	}
}

// TestRunWarnsOfAScriptWhoseInterpreterThisHostLacks: a script naming an
// interpreter this host does not have, by its path or by a name env finds
// in no directory of the proxy's PATH, is said at start, at WARN, with it
// (a review: the first sign was a unit failing on this instance only).
func TestRunWarnsOfAScriptWhoseInterpreterThisHostLacks(t *testing.T) {
	t.Parallel()
	scripts := t.TempDir()
	if err := os.WriteFile(filepath.Join(scripts, "ok.sh"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, run := startStopped(t, scripts)
	if log := run(); strings.Contains(log, "interpreter this host does not have") {
		t.Errorf("scripts whose interpreters exist: the log warns of them:\n%s", log)
	}
	if err := os.WriteFile(filepath.Join(scripts, "py.sh"), []byte("#!/usr/bin/nonexistent-python9\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if log := run(); !strings.Contains(log, "level=WARN msg=\"scripts whose #! interpreter this host does not have") ||
		!strings.Contains(log, "py.sh (#!/usr/bin/nonexistent-python9)") {
		t.Errorf("a script whose interpreter is missing: want a WARN naming it:\n%s", log)
	}
	// One env finds in no directory of the proxy's PATH, which the
	// scripts get: the running proxy looks it up (a review: the most
	// common #! line of a python script was never checked).
	if err := os.WriteFile(filepath.Join(scripts, "env.py"), []byte("#!/usr/bin/env nonexistent-python9\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if log := run(); !strings.Contains(log, "env.py (#!/usr/bin/env nonexistent-python9: nonexistent-python9 is in no directory of the proxy's PATH)") {
		t.Errorf("a script whose interpreter env finds nowhere in PATH: want a WARN naming it:\n%s", log)
	}
}

// TestRunWarnsOfAConfigOthersMayRead: the config holds the account's token
// and key; `proxy run` on one every user may read (a profile saved with a
// shell's umask 022) says so at start, at WARN, naming it, and runs all
// the same. One only its owner may read gets no such line.
func TestRunWarnsOfAConfigOthersMayRead(t *testing.T) {
	t.Parallel()
	path, run := startStopped(t, t.TempDir())
	if log := run(); strings.Contains(log, "token and key, and is readable") {
		t.Errorf("a config only its owner may read: the log warns of it:\n%s", log)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if log := run(); !strings.Contains(log, "level=WARN msg=\"the config holds the account's token and key, and is readable by every user (mode -rw-r--r--)") ||
		!strings.Contains(log, "config="+path) {
		t.Errorf("a config every user may read: want a WARN naming it:\n%s", log)
	}
}

// TestRunWarnsOfAllowedEnvThatAllowsNothing: an allowed_env entry that
// allows nothing a command could set (a name refused for every command,
// NAME_* inside a family refused as a whole) is said at start, at WARN,
// and the proxy runs all the same: a release that refuses more does not
// stop a proxy whose config listed the name (a review: it was a config
// error, and an upgraded service would not start).
func TestRunWarnsOfAllowedEnvThatAllowsNothing(t *testing.T) {
	t.Parallel()
	path, run := startStopped(t, t.TempDir())
	if log := run(); strings.Contains(log, "allowed_env") {
		t.Errorf("no allowed_env: the log speaks of it:\n%s", log)
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("allowed_env: [DEPLOY_TARGET, PATH, LD_*]\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	log := run()
	for _, want := range []string{`environment variable \"PATH\" is refused`, `\"LD_*\" allows nothing: every name beginning LD_ is refused`} {
		if !strings.Contains(log, "level=WARN msg=\"allowed_env lists what no command may set: "+want) {
			t.Errorf("allowed_env naming what no command may set: want a WARN saying %s:\n%s", want, log)
		}
	}
	if strings.Contains(log, "DEPLOY_TARGET") {
		t.Errorf("the entry that allows something is warned of:\n%s", log)
	}
}

// TestRunWarnsOfAllowedEnvThatAllowsAny: allowed_env: ["*"] lets a command
// set any variable not refused everywhere, as every proxy did before
// allowed_env became required for any (a review: zip ran a command from a
// ZIPOPT); the proxy runs, and says at WARN what that lets a caller do.
func TestRunWarnsOfAllowedEnvThatAllowsAny(t *testing.T) {
	t.Parallel()
	path, run := startStopped(t, t.TempDir())
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("allowed_env: [\"*\"]\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if log := run(); !strings.Contains(log, `level=WARN msg="allowed_env holds \"*\": a command may set any variable not refused everywhere`) || !strings.Contains(log, "zip's ZIPOPT") {
		t.Errorf(`allowed_env: ["*"]: want a WARN saying what it lets a command do:\n%s`, log)
	}
}
