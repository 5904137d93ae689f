package agent

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/opsgate/opsgate/internal/waittest"
)

// TestStateDirIsHeldByOneProxyAtATime: the first LockStateDir makes the
// directory and takes it, writing its pid into the lock file; a second one
// (another open file, as another process's would be) is refused with an
// error naming the directory and the holder's pid, and changes nothing in
// the directory; once the first is released the directory can be taken
// again.
func TestStateDirIsHeldByOneProxyAtATime(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	first, err := LockStateDir(dir)
	if err != nil {
		t.Fatalf("first lock of a new state_dir: %v", err)
	}
	t.Cleanup(func() { first.Release() })
	lockPath := filepath.Join(dir, LockFileName)
	before, err := os.ReadFile(lockPath)
	if err != nil || string(before) != strconv.Itoa(os.Getpid())+"\n" {
		t.Fatalf("the lock file holds %q (%v); want this process's pid %d", before, err, os.Getpid())
	}
	state := filepath.Join(dir, StateFileName)
	if err := os.WriteFile(state, []byte("the holder's\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	second, err := LockStateDir(dir)
	var held *StateDirHeldError
	if !errors.As(err, &held) || !errors.Is(err, ErrStateDirHeld) || held.Dir != dir || held.PID != os.Getpid() {
		second.Release()
		t.Fatalf("second lock while the first is held: %v, %#v; want a StateDirHeldError for %s, pid %d", second, err, dir, os.Getpid())
	}
	want := fmt.Sprintf("state_dir %s is held by another running proxy (pid %d): ", dir, os.Getpid())
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("the refusal says %q; want it to begin %q", err, want)
	}
	if after, _ := os.ReadFile(lockPath); !bytes.Equal(after, before) {
		t.Errorf("the refused lock changed the lock file from %q to %q", before, after)
	}
	if data, _ := os.ReadFile(state); string(data) != "the holder's\n" {
		t.Errorf("the refused lock changed %s: %q", StateFileName, data)
	}

	if err := first.Release(); err != nil {
		t.Fatalf("release: %v", err)
	}
	again, err := LockStateDir(dir)
	if err != nil {
		t.Fatalf("lock after the holder released it: %v", err)
	}
	again.Release()
}

// TestStateDirHeldErrorWithoutAPID: a holder whose pid cannot be read is
// still named as a running proxy.
func TestStateDirHeldErrorWithoutAPID(t *testing.T) {
	t.Parallel()
	err := &StateDirHeldError{Dir: "/var/lib/proxy"}
	if got := err.Error(); !strings.HasPrefix(got, "state_dir /var/lib/proxy is held by another running proxy: ") {
		t.Errorf("%q", got)
	}
}

// lockHolderEnv makes the test binary, run as a child, hold the state_dir
// it names (see TestMain).
const lockHolderEnv = "OPSGATE_TEST_HOLD_STATE_DIR"

// holdStateDir takes dir, says so on stdout and holds it until stdin ends.
func holdStateDir(dir string) int {
	l, err := LockStateDir(dir)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("held")
	_, _ = io.Copy(io.Discard, os.Stdin)
	l.Release()
	return 0
}

// TestStateDirIsFreedWhenItsHolderIsKilled: the lock is the OS's, not the
// file's existence: a process that holds the state_dir and is killed
// (SIGKILL on Unix, TerminateProcess on Windows: no code of its own runs)
// leaves it free for the next proxy, as a warm standby started after the
// active one died needs.
func TestStateDirIsFreedWhenItsHolderIsKilled(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pid, kill := holdInChild(t, dir)

	_, err := LockStateDir(dir)
	var held *StateDirHeldError
	if !errors.As(err, &held) || held.PID != pid {
		t.Fatalf("lock while the child holds it: %v; want it refused naming the child's pid %d", err, pid)
	}
	kill()
	l, err := LockStateDir(dir)
	if err != nil {
		t.Fatalf("lock after its holder was killed: %v", err)
	}
	l.Release()
}

// TestCheckStateDirTellsWithoutChangingAnything: CheckStateDir finds no
// holder for a directory that does not exist or has no lock file, and
// makes neither; it names the holder, a child process, of a held one
// without changing the lock file, and finds it free again once the holder
// is killed, all the while leaving the lock to be taken by a proxy.
func TestCheckStateDirTellsWithoutChangingAnything(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	if err := CheckStateDir(dir); err != nil {
		t.Fatalf("a state_dir that does not exist: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the check made the state_dir: %v", err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := CheckStateDir(dir); err != nil {
		t.Fatalf("a state_dir without a lock file: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("the check made files: %v", entries)
	}

	pid, kill := holdInChild(t, dir)
	lockPath := filepath.Join(dir, LockFileName)
	before, _ := os.ReadFile(lockPath)
	fiBefore, _ := os.Stat(lockPath)
	for range 2 {
		err := CheckStateDir(dir)
		var held *StateDirHeldError
		if !errors.As(err, &held) || held.Dir != dir || held.PID != pid {
			t.Fatalf("check while the child holds it: %v; want a StateDirHeldError naming the child's pid %d", err, pid)
		}
	}
	fiAfter, _ := os.Stat(lockPath)
	if after, _ := os.ReadFile(lockPath); !bytes.Equal(after, before) || !fiAfter.ModTime().Equal(fiBefore.ModTime()) || fiAfter.Mode() != fiBefore.Mode() {
		t.Errorf("the check changed the lock file: %q to %q", before, after)
	}

	kill()
	if err := CheckStateDir(dir); err != nil {
		t.Fatalf("check after the holder was killed: %v", err)
	}
	l, err := LockStateDir(dir)
	if err != nil {
		t.Fatalf("lock after checks of a free state_dir: %v", err)
	}
	l.Release()
}

// holdInChild has a child process (this test binary) take the state_dir
// dir and returns its pid once it holds it, and kill, which kills it with
// no code of its own running (SIGKILL, TerminateProcess) and reaps it; the
// test's end kills it too.
func holdInChild(t *testing.T, dir string) (pid int, kill func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), lockHolderEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	kill = func() {
		once.Do(func() {
			if err := cmd.Process.Kill(); err != nil {
				t.Error(err)
			}
			_ = cmd.Wait()
			stdin.Close()
		})
	}
	t.Cleanup(kill)
	said := make(chan string, 1)
	go func() { line, _ := bufio.NewReader(stdout).ReadString('\n'); said <- line }()
	if line := waittest.Recv(t, said, "the child to say it holds the state_dir"); line != "held\n" {
		t.Fatalf("the child did not take the state_dir: %q", line)
	}
	return cmd.Process.Pid, kill
}
