package runner

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestADescriptorTheProxyInheritedIsNotPassedToScripts: a descriptor open
// across exec in the proxy (leaked by what started it, a shell's or a
// supervisor's) reaches no script once KeepInheritedFromScripts has run,
// as the proxy's main does first thing (a review saw a pipe and
// /dev/null of the shell in every script's /proc/self/fd).
func TestADescriptorTheProxyInheritedIsNotPassedToScripts(t *testing.T) {
	t.Parallel()
	fd, err := unix.Open(filepath.Join(t.TempDir(), "leaked"), unix.O_RDWR|unix.O_CREAT, 0o600) // no O_CLOEXEC: as inherited
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	spec := newSpec(t, `if [ -e /proc/self/fd/`+strconv.Itoa(fd)+` ]; then echo open; else echo closed; fi`+"\n")
	if got := strings.TrimSpace(string(run(t, spec).Stdout)); got != "open" {
		t.Fatalf("before: the script saw descriptor %d %s, want open (the leak this guards against)", fd, got)
	}
	KeepInheritedFromScripts()
	if got := strings.TrimSpace(string(run(t, spec).Stdout)); got != "closed" {
		t.Errorf("after KeepInheritedFromScripts the script saw descriptor %d %s, want closed", fd, got)
	}
	if _, err := os.Stat("/proc/self/fd/" + strconv.Itoa(fd)); err != nil {
		t.Errorf("descriptor %d is closed in the proxy itself: %v; want it only kept from scripts", fd, err)
	}
}
