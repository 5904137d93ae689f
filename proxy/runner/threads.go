package runner

import (
	"runtime"
	"sync"
)

// threadReserve is how many threads ReserveThreads makes beyond one per
// GOMAXPROCS (counted up to maxReservedProcs): more than a proxy running 64
// scripts at once has been seen to use (14 in all with GOMAXPROCS 2, in
// make bench's tiny.sh section). The cap keeps the reserve of a proxy on a
// host of many cores within a container's limit of processes (it could not
// start under one below the reserve: its runtime aborts at the first thread
// it cannot make).
const (
	threadReserve    = 16
	maxReservedProcs = 8
)

var reserveOnce sync.Once

// ReserveThreads makes the Go runtime hold, from now on, the threads this
// process will need to run scripts, idle until then: GOMAXPROCS (at most
// maxReservedProcs) plus threadReserve, and the runtime's template thread,
// which the first locked goroutine starts. The runtime keeps a thread it made, and takes an idle one
// before it makes another. So a limit of processes that the scripts reach
// later (ulimit -u, systemd's TasksMax=, a cgroup's pids.max: a thread
// counts as a process) fails the start of a script (ErrNoResources, which
// the agent waits out) rather than a thread the runtime asks for: a
// runtime that cannot make a thread aborts the whole process. A running
// script holds none of them (awaitExit). It does this once per process.
func ReserveThreads() {
	reserveOnce.Do(func() {
		n := min(runtime.GOMAXPROCS(0), maxReservedProcs) + threadReserve
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
