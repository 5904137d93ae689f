package runner

import (
	"bufio"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
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

// ReaperLog is how the reaper writes its lines, so that they read as the
// proxy's own: in its log format (JSON, or slog's text), naming its
// instance. The proxy passes them in the reaper's environment.
type ReaperLog struct {
	JSON       bool
	InstanceID string
}

// The reaper's environment besides ReaperEnv: ReaperLog's fields. A reaper
// started by an older proxy, which sets neither, logs text naming no
// instance.
const (
	reaperFormatEnv   = "PROXY_REAPER_LOG_FORMAT" // "json", or text
	reaperInstanceEnv = "PROXY_REAPER_INSTANCE_ID"
)

// reaperLogger is the reaper's logger, writing to w as getenv's variables
// say (ReaperLog.environ).
func reaperLogger(w io.Writer, getenv func(string) string) *slog.Logger {
	var h slog.Handler = slog.NewTextHandler(w, nil)
	if getenv(reaperFormatEnv) == "json" {
		h = slog.NewJSONHandler(w, nil)
	}
	log := slog.New(h)
	if id := getenv(reaperInstanceEnv); id != "" {
		log = log.With("instance_id", id)
	}
	return log
}

// startingWait bounds how long a reaper whose proxy died while starting
// scripts looks for them (startingScripts): a script's leader is found by
// its environment only once it has exec'd, a moment after its fork. A
// variable so a test can give a slow start longer.
var startingWait = 200 * time.Millisecond

// foundSession is a session found by startingScripts: its leader's start
// time, and the unit whose id its environment holds.
type foundSession struct {
	start uint64
	work  string
}

// ServeReaper is the reaper's main: it reads registrations from in until
// EOF, then kills the process tree of every session still registered and
// returns the exit code. It writes to errOut, in the proxy's log format
// (ReaperLog), only when it killed something or failed to, and only once
// it is done killing (errOut may be a pipe of something that died with
// the proxy).
//
// The lines it reads: "+ SID START" registers the session SID (the
// script's pid) whose leader started at START (clock ticks since boot, from
// /proc/PID/stat; 0 where unknown), "= SID WORK_ID" names the unit whose
// script leads it, "- SID" forgets it. "? WORK_ID", written before the
// script is started, says that the script of that unit is starting, until
// its "= SID WORK_ID" or a "! WORK_ID" (it did not start): if the proxy
// dies in between, the reaper looks for the session by the unit's id in
// its leader's environment (startingScripts). Anything else is ignored, so
// that a reaper of a newer binary (the file replaced under a running proxy)
// still serves an older proxy, and one of an older binary a newer proxy.
func ServeReaper(in io.Reader, errOut io.Writer) int {
	ignoreStopSignals()
	return serveReaper(in, reaperLogger(errOut, os.Getenv))
}

func serveReaper(in io.Reader, log *slog.Logger) int {
	sessions := map[int]uint64{}
	works := map[int]string{}
	starting := map[string]bool{} // units whose script is starting, not yet registered
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && (f[0] == "?" || f[0] == "!") {
			if f[0] == "?" {
				starting[f[1]] = true
			} else {
				delete(starting, f[1])
			}
			continue
		}
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
		case f[0] == "=" && len(f) == 3:
			works[sid] = f[2]
			delete(starting, f[2])
		case f[0] == "-":
			delete(sessions, sid)
			delete(works, sid)
		}
	}
	// EOF, or a read error: either way the proxy can no longer tell us
	// anything, and it may be gone.
	if len(starting) > 0 {
		for sid, s := range startingScripts(starting, startingWait) {
			if _, registered := sessions[sid]; !registered {
				sessions[sid], works[sid] = s.start, s.work
			}
		}
	}
	if len(sessions) == 0 {
		return 0
	}
	var killed []int
	var killedWorks []string
	failed := 0
	for _, sid := range slices.Sorted(maps.Keys(sessions)) {
		switch ok, err := reapSession(sid, sessions[sid]); {
		case err != nil:
			failed++
			attrs := []any{"reaper_pid", os.Getpid(), "session", sid}
			if w := works[sid]; w != "" {
				attrs = append(attrs, "work_id", w)
			}
			log.Error("the proxy ended with scripts running; its reaper could not kill all of a script's processes", append(attrs, "err", err)...)
		case ok:
			// In the order of sessions, "-" where the proxy named no
			// unit (an older one): the lists line up.
			w := works[sid]
			if w == "" {
				w = "-"
			}
			killed = append(killed, sid)
			killedWorks = append(killedWorks, w)
		}
	}
	if len(killed) > 0 {
		log.Error("the proxy ended with scripts running; its reaper killed the process trees of their sessions", "reaper_pid", os.Getpid(), "sessions", killed, "work_ids", killedWorks)
	}
	if failed > 0 {
		return 1
	}
	return 0
}
