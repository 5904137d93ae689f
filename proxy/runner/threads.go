package runner

import (
	"runtime"
	"sync"
)

// threadReserve is how many threads ReserveThreads makes beyond one per
// GOMAXPROCS: more than a proxy running 64 scripts at once has been seen to
// use (14 in all with GOMAXPROCS 2, in make bench's tiny.sh section).
const threadReserve = 16

var reserveOnce sync.Once

// ReserveThreads makes the Go runtime hold, from now on, the threads this
// process will need to run scripts, idle until then: GOMAXPROCS plus
// threadReserve. The runtime keeps a thread it made, and takes an idle one
// before it makes another. So a limit of processes that the scripts reach
// later (ulimit -u, systemd's TasksMax=, a cgroup's pids.max: a thread
// counts as a process) fails the start of a script (ErrNoResources, which
// the agent waits out) rather than a thread the runtime asks for: a
// runtime that cannot make a thread aborts the whole process. A running
// script holds none of them (awaitExit). It does this once per process.
func ReserveThreads() {
	reserveOnce.Do(func() {
		n := runtime.GOMAXPROCS(0) + threadReserve
		var locked, release, done sync.WaitGroup
		locked.Add(n)
		release.Add(1)
		for range n {
			done.Go(func() {
				// A goroutine locked to its thread keeps the thread
				// to itself while it waits: the others need threads
				// of their own.
				runtime.LockOSThread()
				locked.Done()
				release.Wait()
				runtime.UnlockOSThread() // the thread stays, idle: ended locked, it would end too
			})
		}
		locked.Wait()
		release.Done()
		done.Wait()
	})
}
