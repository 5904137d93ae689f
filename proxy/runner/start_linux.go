package runner

import (
	"os/exec"
	"syscall"
)

// startScript starts cmd, whose SysProcAttr configureCmd set, with SIGKILL
// as its parent-death signal. So a script started a moment before the
// proxy dies (SIGKILL, the OOM killer, a crash) dies with it, where the
// reaper may not have been told of it yet: the proxy registers a script
// with the reaper once its start has returned, and a script started just
// before the proxy died ran on, unlimited, past its deadline (a review: 9
// in 30 runs of a script that killed its proxy first thing). The reaper
// still kills the rest of the tree (what the script starts outlives it
// otherwise); what the script forked before it was registered, if the
// proxy died in between, is left to run.
//
// Linux sends the signal when the thread that forked the script ends,
// not only the process. The Go runtime ends a thread only when a
// goroutine ends locked to it (runtime.LockOSThread without
// UnlockOSThread), which nothing in the proxy does
// (TestNothingInTheProxyEndsAGoroutineLockedToItsThread in test/deps).
// Starting every script from one goroutine locked to its thread for good
// made tiny.sh 15 points slower against fork/exec in make bench (10 with
// one such goroutine per processor): each start then woke another thread
// and waited for it.
func startScript(cmd *exec.Cmd) error {
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	return cmd.Start()
}
