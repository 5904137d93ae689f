package runner

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// threadsChildEnv makes the test binary runScriptsCountingThreads, before
// any test: a fresh process, whose threads are its own runtime's and Run's
// alone.
const threadsChildEnv = "RUNNER_TEST_THREADS_CHILD"

func init() {
	if dir := os.Getenv(threadsChildEnv); dir != "" {
		os.Exit(runScriptsCountingThreads(dir)) // a child of TestRunningScriptsHoldNoThreadEach
	}
}

// scriptsAtOnce is how many scripts the child runs at once.
const scriptsAtOnce = 48

// TestRunningScriptsHoldNoThreadEach: a process running 48 scripts at
// once through Run has about as many threads as an idle one, not a thread
// per script: the wait for a script's exit is in the runtime's poller. With
// Wait blocked in waitid, each running script held a thread, and a proxy
// whose user or service was at its limit of processes (a thread counts as
// one) was aborted by its runtime, which cannot run without the thread it
// asks for.
func TestRunningScriptsHoldNoThreadEach(t *testing.T) {
	t.Parallel()
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err != nil {
		t.Skipf("no pidfd here (Linux before 5.4, a seccomp filter): each running script holds a thread: %v", err)
	}
	unix.Close(fd)
	dir := t.TempDir()
	writeScript(t, dir, "s.sh", "exec sleep 60\n")
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), threadsChildEnv+"="+dir, "GOMAXPROCS=2")
	out, err := child.CombinedOutput()
	if err != nil {
		t.Fatalf("the child: %v\n%s", err, out)
	}
	var idle, running int
	if _, err := fmt.Sscanf(lastLine(string(out)), "threads idle %d, with %d scripts running %d", &idle, new(int), &running); err != nil {
		t.Fatalf("the child wrote %q: %v", out, err)
	}
	t.Logf("threads: %d idle, %d with %d scripts running", idle, running, scriptsAtOnce)
	if running-idle >= scriptsAtOnce/4 {
		t.Errorf("%d scripts running took the process from %d threads to %d; want no thread per script", scriptsAtOnce, idle, running)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// runScriptsCountingThreads runs scriptsAtOnce scripts s.sh of dir at
// once, and once all have started writes its threads before and then on
// its last line; it cancels them, and fails unless each Run says so.
func runScriptsCountingThreads(dir string) int {
	idle, err := threads()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var started atomic.Int32
	all := make(chan struct{})
	errs := make(chan error, scriptsAtOnce)
	var wg sync.WaitGroup
	for range scriptsAtOnce {
		wg.Go(func() {
			_, err := Run(ctx, Spec{ScriptsDir: dir, Script: "s.sh", Deadline: time.Now().Add(time.Minute), Started: func() {
				if started.Add(1) == scriptsAtOnce {
					close(all)
				}
			}})
			errs <- err
		})
	}
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		fmt.Fprintf(os.Stderr, "%d of %d scripts started in 30 s\n", started.Load(), scriptsAtOnce)
		cancel() // the scripts started are killed
		wg.Wait()
		return 1
	}
	time.Sleep(100 * time.Millisecond) // for the waits to settle, wherever they are
	running, err := threads()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, ErrCancelled) {
			fmt.Fprintf(os.Stderr, "a script's Run returned %v; want it cancelled\n", err)
			return 1
		}
	}
	fmt.Printf("threads idle %d, with %d scripts running %d\n", idle, scriptsAtOnce, running)
	return 0
}

// threads is the number of this process's threads.
func threads() (int, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Threads:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, errors.New("no Threads line in /proc/self/status")
}
