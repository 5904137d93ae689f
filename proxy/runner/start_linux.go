package runner

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// The scripts are started from one goroutine locked to its thread for
// the life of the process (spawnLoop), with SIGKILL as their parent-death
// signal: Linux sends it when the thread that forked them ends, which this
// one does only with the process. So a script started a moment before
// the proxy dies (SIGKILL, the OOM killer, a crash) dies with it, where
// the reaper may not have been told of it yet: the proxy registers a
// script with the reaper once its start has returned, and a script
// started just before the proxy died ran on, unlimited, past its
// deadline (a review: 9 in 30 runs of a script that killed its proxy
// first thing). The reaper still kills the rest of the tree (what the
// script starts outlives it otherwise). What the script forked before it
// was registered, if the proxy died in between, is left to run.
var spawner struct {
	once sync.Once
	reqs chan spawnReq
}

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

// startScript starts cmd, whose SysProcAttr configureCmd set, with SIGKILL
// as its parent-death signal, from spawnLoop's thread.
func startScript(cmd *exec.Cmd) error {
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnReq)
		go spawnLoop(spawner.reqs)
	})
	done := make(chan error, 1)
	spawner.reqs <- spawnReq{cmd: cmd, done: done}
	return <-done
}

// spawnLoop starts the scripts asked of it, one at a time, on a thread it
// keeps to itself and never gives back: ended while locked, the thread
// would end too, and its scripts get their parent-death signal.
func spawnLoop(reqs <-chan spawnReq) {
	runtime.LockOSThread()
	for r := range reqs {
		r.done <- r.cmd.Start()
	}
}
