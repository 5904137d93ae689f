package service

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestCheckNotTemporaryRefusesPathsUnderATemporaryDirectory: a service's
// file under /tmp, /var/tmp or TMPDIR is refused, naming the path and where
// to put it instead; a path beside them is not.
func TestCheckNotTemporaryRefusesPathsUnderATemporaryDirectory(t *testing.T) {
	refused := []string{os.TempDir(), filepath.Join(os.TempDir(), "opsgate", "data"), t.TempDir()}
	allowed := []string{}
	if runtime.GOOS != "windows" {
		refused = append(refused, "/tmp/x/proxy", "/var/tmp/scripts", "/tmp/../tmp/x")
		allowed = append(allowed, "/var/lib/automator", "/tmpfoo/x", "/usr/local/bin/proxy", "/var/tmpx")
	}
	for _, p := range refused {
		err := CheckNotTemporary(Data, "the data directory", p)
		if err == nil || !strings.Contains(err.Error(), "the data directory "+p+" is under the temporary directory") || !strings.Contains(err.Error(), "move it") {
			t.Errorf("%s: %v; want it refused as a temporary directory", p, err)
		}
	}
	for _, p := range allowed {
		if err := CheckNotTemporary(Data, "the data directory", p); err != nil {
			t.Errorf("%s: %v; want it accepted", p, err)
		}
	}
}

// TestCheckNotTemporaryFollowsLinks: a link outside the temporary
// directories that leads into one is refused too.
func TestCheckNotTemporaryFollowsLinks(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("links need a privilege on Windows")
	}
	parent, err := os.MkdirTemp(".", "link-test-") // beside the package's sources, not under TMPDIR
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(parent) })
	abs, _ := filepath.Abs(parent)
	if CheckNotTemporary(Data, "x", abs) != nil {
		t.Skipf("the package's directory %s is itself under a temporary directory", abs)
	}
	link := filepath.Join(abs, "data")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	if err := CheckNotTemporary(Data, "the data directory", link); err == nil {
		t.Errorf("a link into a temporary directory was accepted")
	}
}

// TestCheckNotTemporarySaysWhereThatKindOfFileBelongs: the refusal names
// where the kind of file refused belongs (a binary, data, scripts), not
// every kind's place whatever the operator gave.
func TestCheckNotTemporarySaysWhereThatKindOfFileBelongs(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x")
	places := map[PathKind]string{Binary: "/usr/local/bin", Data: "/var/lib", Scripts: "/srv or /opt"}
	if runtime.GOOS == "windows" {
		places = map[PathKind]string{Binary: `C:\Program Files`, Data: `C:\ProgramData`, Scripts: `C:\ProgramData`}
	}
	for kind, place := range places {
		err := CheckNotTemporary(kind, "the thing", p)
		if err == nil || !strings.Contains(err.Error(), "; move it ") || !strings.HasSuffix(err.Error(), place) {
			t.Errorf("kind %d: %v; want it refused, saying to move it to %s", kind, err, place)
			continue
		}
		for other, elsewhere := range places {
			if elsewhere != place && strings.Contains(err.Error(), elsewhere) {
				t.Errorf("kind %d: %v; it names %s, the place of kind %d too", kind, err, elsewhere, other)
			}
		}
	}
}
