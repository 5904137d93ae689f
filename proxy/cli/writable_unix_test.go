//go:build !windows

package cli

import (
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
)

// TestWritableByOthersListsWhatOthersMayChangeOfTheScripts: a scripts
// directory, a directory above it, or a runnable script that every user
// may write (or a group other than root's) is listed, with who and the
// mode; one above it with the sticky bit, a file that is not runnable,
// and what only its owner (or root's group) may write are not.
func TestWritableByOthersListsWhatOthersMayChangeOfTheScripts(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	above, sticky := filepath.Join(base, "above"), filepath.Join(base, "sticky")
	dir := filepath.Join(above, "sticky-not", "scripts")
	for _, d := range []string{dir, sticky} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho ok\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("tidy.sh", 0o755)
	if got := writableByOthers(dir); len(got) != 0 {
		t.Fatalf("a tidy scripts directory: %q, want nothing listed", got)
	}

	loose := write("loose.sh", 0o757)
	write("notes.txt", 0o666) // not runnable: no unit runs it
	chmod(t, dir, 0o777)
	chmod(t, above, 0o757)
	chmod(t, sticky, 0o777|os.ModeSticky)
	got := strings.Join(writableByOthers(dir), "\n")
	for _, want := range []string{
		loose + ": writable by every user (mode -rwxr-xrwx)",
		dir + ": writable by every user (mode drwxrwxrwx)",
		above + ": writable by every user (mode drwxr-xrwx)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("listed:\n%s\nwant a line %q", got, want)
		}
	}
	if strings.Contains(got, "notes.txt") || strings.Contains(got, "tidy.sh") {
		t.Errorf("listed:\n%s\nwant neither a file that is not runnable nor one only its owner may write", got)
	}

	// Above with the sticky bit: no one may replace what is not theirs.
	inSticky := filepath.Join(sticky, "scripts")
	if err := os.Mkdir(inSticky, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := writableByOthers(inSticky); len(got) != 0 {
		t.Errorf("a scripts directory under one with the sticky bit: %q, want nothing listed", got)
	}

	// A group: root's is the owner's own; another group's members are not.
	chmod(t, dir, 0o775)
	chmod(t, above, 0o755)
	chmod(t, loose, 0o775)
	if os.Geteuid() != 0 {
		return // chown to another group needs root
	}
	if got := writableByOthers(dir); len(got) != 0 {
		t.Errorf("writable by root's group only: %q, want nothing listed", got)
	}
	if err := os.Chown(loose, -1, 65534); err != nil {
		t.Fatal(err)
	}
	group := "group 65534"
	if g, err := user.LookupGroupId("65534"); err == nil {
		group = "group " + g.Name
	}
	if got := strings.Join(writableByOthers(dir), "\n"); !strings.Contains(got, loose+": writable by "+group+" ") || strings.Contains(got, dir+":") {
		t.Errorf("a script writable by group 65534: listed %q, want that script alone, naming the group (%s)", got, group)
	}

	// Root's group aside, the sticky bit above the scripts keeps a group
	// from replacing what is not theirs as it keeps every user.
	chmod(t, loose, 0o755)
	if err := os.Chown(above, -1, 65534); err != nil {
		t.Fatal(err)
	}
	chmod(t, above, 0o775|os.ModeSticky)
	if got := writableByOthers(dir); len(got) != 0 {
		t.Errorf("above the scripts, a directory its group may write, with the sticky bit: listed %q, want nothing", got)
	}
	chmod(t, above, 0o775)
	if got := strings.Join(writableByOthers(dir), "\n"); !strings.Contains(got, above+": writable by "+group+" ") {
		t.Errorf("above the scripts, a directory its group may write: listed %q, want it listed", got)
	}
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// TestWritableByOthersIgnoresTheStickyBitOnlyAboveTheScripts: the sticky
// bit keeps others from replacing what is not theirs in a directory above
// the scripts directory, but not from adding scripts to the scripts
// directory itself, and means nothing on a script: both are listed.
func TestWritableByOthersIgnoresTheStickyBitOnlyAboveTheScripts(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "scripts")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "run.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho ok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	chmod(t, dir, 0o777|os.ModeSticky)
	chmod(t, script, 0o757|os.ModeSticky)
	got := strings.Join(writableByOthers(dir), "\n")
	for _, want := range []string{dir + ": writable by every user", script + ": writable by every user"} {
		if !strings.Contains(got, want) {
			t.Errorf("listed:\n%s\nwant a line %q: the sticky bit does not keep others from adding scripts, nor from writing a script", got, want)
		}
	}
}

// TestWritableByOthersChecksWhereTheScriptsReallyAre: a scripts directory
// given through a link, or as a relative path, is checked where it is:
// the directories above its real, absolute path are listed, under that
// path.
func TestWritableByOthersChecksWhereTheScriptsReallyAre(t *testing.T) {
	base := t.TempDir()
	loose := filepath.Join(base, "loose")
	dir := filepath.Join(loose, "scripts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	chmod(t, loose, 0o777)
	want := loose + ": writable by every user"

	link := filepath.Join(base, "tidy", "scripts")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(writableByOthers(link), "\n"); !strings.Contains(got, want) {
		t.Errorf("scripts_dir %s, a link to %s: listed %q, want a line %q", link, dir, got, want)
	}

	t.Chdir(loose)
	if got := strings.Join(writableByOthers("scripts"), "\n"); !strings.Contains(got, want) {
		t.Errorf("scripts_dir \"scripts\" in %s: listed %q, want a line %q", loose, got, want)
	}
}

// TestWritableByOthersListsADirectoryInsideHoldingAScript: a runnable
// script that is a link to a file in a directory inside the scripts
// directory runs that file, which whoever may write that directory may
// replace: it is listed, unless its sticky bit keeps them from replacing
// what is not theirs.
func TestWritableByOthersListsADirectoryInsideHoldingAScript(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "scripts")
	lib := filepath.Join(dir, "lib", "v2")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lib, "real.sh"), []byte("#!/bin/sh\necho ok\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"run.sh", "also.sh"} { // a directory is listed once
		if err := os.Symlink(filepath.Join("lib", "v2", "real.sh"), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if got := writableByOthers(dir); len(got) != 0 {
		t.Fatalf("a tidy scripts directory: %q, want nothing listed", got)
	}
	for _, d := range []string{lib, filepath.Dir(lib)} {
		chmod(t, d, 0o777)
		if got := strings.Join(writableByOthers(dir), "\n"); strings.Count(got, d+": writable by every user (mode drwxrwxrwx)") != 1 {
			t.Errorf("run.sh and also.sh link to a file under %s, which every user may write: listed %q, want it once", d, got)
		}
		chmod(t, d, 0o777|os.ModeSticky)
		if got := writableByOthers(dir); len(got) != 0 {
			t.Errorf("run.sh links to a file under %s, which every user may write, with the sticky bit: listed %q, want nothing", d, got)
		}
		chmod(t, d, 0o755)
	}
}

// TestWritableByOthersListsAScriptsInterpreter: the program a script's #!
// line names, and a directory above it, that every user may write are
// listed: whoever replaces the interpreter runs as the proxy's user at
// the next unit (a review: only the scripts' side was looked at).
func TestWritableByOthersListsAScriptsInterpreter(t *testing.T) {
	t.Parallel()
	dir, tools := filepath.Join(t.TempDir(), "scripts"), filepath.Join(t.TempDir(), "tools")
	for _, d := range []string{dir, tools} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	interp := filepath.Join(tools, "myinterp")
	if err := os.WriteFile(interp, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a.sh", "b.sh"} { // an interpreter is listed once
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!"+interp+" -e\necho ok\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got := writableByOthers(dir); len(got) != 0 {
		t.Fatalf("tidy scripts and interpreter: %q, want nothing listed", got)
	}
	chmod(t, tools, 0o777)
	chmod(t, interp, 0o777)
	got := strings.Join(writableByOthers(dir), "\n")
	for _, want := range []string{interp + ": writable by every user (mode -rwxrwxrwx)", tools + ": writable by every user (mode drwxrwxrwx)"} {
		if strings.Count(got, want) != 1 {
			t.Errorf("listed:\n%s\nwant the line %q once", got, want)
		}
	}

	// A link to a tidy interpreter in a directory others may write (a
	// virtualenv's python): the link can be replaced (a re-review).
	venv, scripts2 := filepath.Join(t.TempDir(), "venv"), filepath.Join(t.TempDir(), "scripts")
	for _, d := range []string{venv, scripts2} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/bin/sh", filepath.Join(venv, "sh")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(scripts2, "v.sh"), []byte("#!"+filepath.Join(venv, "sh")+"\necho ok\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := writableByOthers(scripts2); len(got) != 0 {
		t.Fatalf("a tidy link to a tidy interpreter: %q, want nothing listed", got)
	}
	chmod(t, venv, 0o777)
	if got := strings.Join(writableByOthers(scripts2), "\n"); !strings.Contains(got, venv+": writable by every user (mode drwxrwxrwx)") {
		t.Errorf("the directory of the interpreter's link, writable by every user: listed %q, want it", got)
	}
}

// TestWritableByOthersListsWhatAnotherUserOwns: a script, the scripts
// directory or a directory above it owned by a user other than root and
// the proxy's own is listed, naming the owner, whatever its mode: its
// owner may change it (chmod, or rename what a sticky directory holds).
// Before, only the mode was looked at, so a script that user nobody owned,
// mode 0755, run by a proxy as root, went unsaid (a review).
func TestWritableByOthersListsWhatAnotherUserOwns(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
	nobody := "user 65534"
	if u, err := user.LookupId("65534"); err == nil {
		nobody = "user " + u.Username
	}
	for _, owned := range []string{"script", "scripts directory", "directory above"} {
		t.Run(owned, func(t *testing.T) {
			above := filepath.Join(t.TempDir(), "above")
			dir := filepath.Join(above, "scripts")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			script := writeRunnable(t, dir, "s.sh")
			if got := writableByOthers(dir); len(got) != 0 {
				t.Fatalf("all owned by root: %q, want nothing listed", got)
			}
			path := map[string]string{"script": script, "scripts directory": dir, "directory above": above}[owned]
			if err := os.Chown(path, 65534, -1); err != nil {
				t.Fatal(err)
			}
			got := writableByOthers(dir)
			if want := path + ": owned by " + nobody + ", not root or this proxy's user"; len(got) != 1 || !strings.HasPrefix(got[0], want) {
				t.Errorf("the %s owned by %s: listed %q, want it alone: %q", owned, nobody, got, want)
			}
		})
	}
}

// TestStatusTakesTheStateDirsOwnerForTheProxysUser: `proxy status`, run by
// root for a service that runs as another user, takes the owner of the
// service's state_dir (which install gives the service's user) for the
// proxy's user: scripts that user owns are not listed as another user's,
// and those of a third user are. Before, status compared with its own
// user, root, and listed the service user's scripts (a review).
func TestStatusTakesTheStateDirsOwnerForTheProxysUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
	base := t.TempDir()
	dir, state := filepath.Join(base, "scripts"), filepath.Join(base, "state")
	for _, d := range []string{dir, state} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := writeRunnable(t, dir, "s.sh")
	const service, third = 65534, 65533
	for _, p := range []string{state, script} {
		if err := os.Chown(p, service, -1); err != nil {
			t.Fatal(err)
		}
	}
	if got := writableByOthersAs(dir, state); len(got) != 0 {
		t.Errorf("a script the service's user owns: listed %q, want nothing", got)
	}
	if got := writableByOthers(dir); len(got) != 1 || !strings.Contains(got[0], script+": owned by ") {
		t.Errorf("the same, as root's own proxy: listed %q, want the script", got)
	}
	if err := os.Chown(script, third, -1); err != nil {
		t.Fatal(err)
	}
	if got := writableByOthersAs(dir, state); len(got) != 1 || !strings.Contains(got[0], script+": owned by ") {
		t.Errorf("a script a third user owns: listed %q, want it", got)
	}
}

// writeRunnable writes a script named name in dir, mode 0755 whatever the
// umask, and returns its path.
func writeRunnable(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho ok\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	chmod(t, p, 0o755)
	return p
}
