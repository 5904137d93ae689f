//go:build linux

package proctest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeBuild replaces the go build of Binaries for the test with one that
// writes stand-in binaries, and reports how many times it was called.
func fakeBuild(t *testing.T) *int {
	t.Helper()
	calls := new(int)
	real := build
	build = func(dir string, race bool) error {
		*calls++
		for _, name := range []string{"automator", "proxy"} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
				return err
			}
		}
		return nil
	}
	t.Cleanup(func() { build = real })
	return calls
}

// prebuiltDir makes a directory holding the named executables.
func prebuiltDir(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range names {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestBinariesUsesThePrebuiltOnesWithoutBuilding(t *testing.T) {
	calls := fakeBuild(t)
	dir := prebuiltDir(t, "automator", "proxy", "race/automator", "race/proxy")
	t.Setenv(EnvBin, dir)
	for _, race := range []bool{false, true} {
		b, err := Binaries("", "proctest-", race)
		if err != nil {
			t.Fatalf("race %v: %v", race, err)
		}
		want := dir
		if race {
			want = filepath.Join(dir, "race")
		}
		if b.Dir != want || b.Automator != filepath.Join(want, "automator") || b.Proxy != filepath.Join(want, "proxy") {
			t.Errorf("race %v: got %+v, want the binaries of %s", race, b, want)
		}
		b.Remove()
		if _, err := os.Stat(b.Automator); err != nil {
			t.Errorf("race %v: Remove removed the prebuilt binaries: %v", race, err)
		}
	}
	if *calls != 0 {
		t.Errorf("built %d times with %s set, want 0", *calls, EnvBin)
	}
}

func TestBinariesLinksThePrebuiltOnesUnderParent(t *testing.T) {
	calls := fakeBuild(t)
	dir := prebuiltDir(t, "automator", "proxy")
	t.Setenv(EnvBin, dir)
	parent := t.TempDir()
	b, err := Binaries(parent, "proctest-", false)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(b.Dir) != parent {
		t.Errorf("the binaries are in %s, want a directory of their own under %s", b.Dir, parent)
	}
	for _, path := range []string{b.Automator, b.Proxy} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm()&0o111 == 0 {
			t.Errorf("%s: %v, %v; want an executable file", path, fi, err)
		}
	}
	if *calls != 0 {
		t.Errorf("built %d times with %s set, want 0", *calls, EnvBin)
	}
	b.Remove()
	if _, err := os.Stat(b.Dir); !os.IsNotExist(err) {
		t.Errorf("Remove left %s: %v", b.Dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "automator")); err != nil {
		t.Errorf("Remove removed the prebuilt binaries: %v", err)
	}
}

func TestBinariesFailsClearlyWhenAPrebuiltOneIsMissing(t *testing.T) {
	calls := fakeBuild(t)
	noExec := prebuiltDir(t, "automator", "proxy")
	if err := os.Chmod(filepath.Join(noExec, "proxy"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		dir  string
		race bool
		want []string
	}{
		{"no proxy", prebuiltDir(t, "automator"), false, []string{"proxy: no such file or directory"}},
		{"proxy not executable", noExec, false, []string{"proxy is not an executable file"}},
		{"no race-built ones", prebuiltDir(t, "automator", "proxy"), true, []string{"race-built automator and proxy", "race/automator: no such file", "race/proxy: no such file"}},
		{"relative", "bin", false, []string{"not an absolute path"}},
	} {
		t.Setenv(EnvBin, c.dir)
		b, err := Binaries("", "proctest-", c.race)
		if err == nil {
			t.Errorf("%s: got %+v, want an error", c.name, b)
			continue
		}
		for _, w := range append(c.want, EnvBin+"="+c.dir) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", c.name, err, w)
			}
		}
	}
	if *calls != 0 {
		t.Errorf("built %d times with %s set, want 0", *calls, EnvBin)
	}
}

func TestBinariesBuildsWhenNoneArePrebuilt(t *testing.T) {
	calls := fakeBuild(t)
	t.Setenv(EnvBin, "")
	parent := t.TempDir()
	b, err := Binaries(parent, "proctest-", false)
	if err != nil {
		t.Fatal(err)
	}
	if *calls != 1 || filepath.Dir(b.Dir) != parent {
		t.Errorf("built %d times into %s; want once, into a directory under %s", *calls, b.Dir, parent)
	}
	if _, err := os.Stat(b.Proxy); err != nil {
		t.Error(err)
	}
	b.Remove()
	if _, err := os.Stat(b.Dir); !os.IsNotExist(err) {
		t.Errorf("Remove left the built binaries' %s: %v", b.Dir, err)
	}
}
