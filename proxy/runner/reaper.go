package runner

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// The reaper kills the scripts of a proxy that died (SIGKILL, a crash, the
// OOM killer) while they ran. Each script leads a session of its own, so a
// dead proxy's scripts are re-parented to init and nothing would enforce
// their deadlines (guarantee 7). On unix the proxy therefore starts, at its
// first script, one helper process: its own binary again, with ReaperEnv
// set, in a session of its own, ignoring SIGINT, SIGTERM and SIGHUP. Its
// stdin is the read end of a pipe whose write end only the proxy holds
// (close-on-exec: scripts do not inherit it). The proxy writes a line there
// for each script session it starts and one for each it has finished with;
// when the reaper reads EOF, the proxy is gone however it ended, and the
// reaper kills every session still registered, then exits. On windows each
// script's job object dies with the proxy, and no reaper is started.

// ReaperEnv, set to "1", makes the proxy binary run as the reaper of its
// parent proxy's scripts (ServeReaper) instead of as the proxy: main checks
// it before anything else. It is not part of the interface (DESIGN.md),
// which is why it is an environment variable, not a flag or a command.
const ReaperEnv = "PROXY_REAPER"

// ServeReaper is the reaper's main: it reads registrations from in until
// EOF, then kills the process tree of every session still registered and
// returns the exit code. It writes to errOut only when it killed something
// or failed to, and only once it is done killing (errOut may be a pipe of
// something that died with the proxy).
//
// The lines it reads: "+ SID START" registers the session SID (the
// script's pid) whose leader started at START (clock ticks since boot, from
// /proc/PID/stat; 0 where unknown), "- SID" forgets it. Anything else is
// ignored, so that a reaper of a newer binary (the file replaced under a
// running proxy) still serves an older proxy.
func ServeReaper(in io.Reader, errOut io.Writer) int {
	ignoreStopSignals()
	return serveReaper(in, errOut)
}

func serveReaper(in io.Reader, errOut io.Writer) int {
	sessions := map[int]uint64{}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		sid, err := strconv.Atoi(f[1])
		if err != nil || sid <= 1 {
			continue
		}
		switch {
		case f[0] == "+" && len(f) == 3:
			if start, err := strconv.ParseUint(f[2], 10, 64); err == nil {
				sessions[sid] = start
			}
		case f[0] == "-":
			delete(sessions, sid)
		}
	}
	// EOF, or a read error: either way the proxy can no longer tell us
	// anything, and it may be gone.
	if len(sessions) == 0 {
		return 0
	}
	var killed []string
	var failed []error
	for _, sid := range slices.Sorted(func(yield func(int) bool) {
		for sid := range sessions {
			if !yield(sid) {
				return
			}
		}
	}) {
		switch ok, err := reapSession(sid, sessions[sid]); {
		case err != nil:
			failed = append(failed, err)
		case ok:
			killed = append(killed, strconv.Itoa(sid))
		}
	}
	if len(killed) > 0 {
		fmt.Fprintf(errOut, "proxy reaper (pid %d): the proxy ended with scripts running; killed the process trees of sessions %s\n",
			os.Getpid(), strings.Join(killed, ", "))
	}
	for _, err := range failed {
		fmt.Fprintf(errOut, "proxy reaper (pid %d): the proxy ended with scripts running; %v\n", os.Getpid(), err)
	}
	if len(failed) > 0 {
		return 1
	}
	return 0
}
