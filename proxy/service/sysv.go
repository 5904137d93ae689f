package service

import (
	"strconv"
	"strings"
)

// SysV file locations.
const (
	sysvInitDir = "/etc/init.d"
	sysvPIDDir  = "/var/run"
	sysvLogDir  = "/var/log"
)

// SysVScript renders the init script Install writes to /etc/init.d/<Name>
// on a Linux host without systemd. Beyond start, stop, restart and status
// (LSB exit codes), it supervises: a service that exits is started again
// five seconds later, until `stop`. Stop sends SIGTERM to the service alone
// and waits up to StopTimeout for running work to finish before it kills
// the whole session. The service's output goes to /var/log/<Name>.log,
// with the supervisor's line about a restart, a JSON record when the
// service logs JSON; its pid file is /var/run/<Name>.pid.
func SysVScript(s Spec) string {
	return sysvScript(s, sysvPIDDir+"/"+s.Name+".pid", sysvLogDir+"/"+s.Name+".log", EnvironmentFile(s.Name), "5")
}

func sysvScript(s Spec, pidFile, logFile, envFile, restartDelay string) string {
	words := make([]string, 0, 6+len(s.Arguments))
	if s.User != "" {
		group := s.Group
		if group == "" {
			group = s.User
		}
		words = append(words, "setpriv", "--reuid="+shQuote(s.User), "--regid="+shQuote(group), "--init-groups", "--")
	}
	words = append(words, shQuote(s.Executable))
	for _, a := range s.Arguments {
		words = append(words, shQuote(a))
	}
	return strings.NewReplacer(
		"@PROG@", progName(s),
		"@NAME@", s.Name,
		"@DESCRIPTION@", oneLine(s.Description),
		"@NAME_Q@", shQuote(s.Name),
		"@PID_FILE_Q@", shQuote(pidFile),
		"@LOG_FILE_Q@", shQuote(logFile),
		"@STOP_TIMEOUT@", strconv.Itoa(int(s.stopTimeout().Seconds())),
		"@RESTART_DELAY@", restartDelay,
		"@COMMAND@", strings.Join(words, " "),
		"@ENV_FILE_Q@", shQuote(envFile),
	).Replace(sysvTemplate)
}

// shQuote quotes a word for sh in single quotes; a single quote inside
// closes the quoting, is escaped with a backslash, and reopens it.
func shQuote(w string) string {
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

const sysvTemplate = `#!/bin/sh
# Written by ` + "`@PROG@ install`; removed by `@PROG@ uninstall`" + `.
### BEGIN INIT INFO
# Provides:          @NAME@
# Required-Start:    $network $remote_fs $syslog
# Required-Stop:     $network $remote_fs $syslog
# Default-Start:     2 3 4 5
# Default-Stop:      0 1 6
# Short-Description: @DESCRIPTION@
### END INIT INFO

name=@NAME_Q@
pid_file=@PID_FILE_Q@
log_file=@LOG_FILE_Q@
stop_timeout=@STOP_TIMEOUT@
restart_delay=@RESTART_DELAY@
lock_file=$pid_file.lock
self=$(readlink -f "$0")
nl='
'

# run replaces itself with the service, with the variables of the optional
# environment file exported.
run() {
	if [ -r @ENV_FILE_Q@ ]; then
		set -a
		. @ENV_FILE_Q@
		set +a
	fi
	exec @COMMAND@
}

# alive PID: the process exists and is not a zombie (the zombie of an
# orphan lingers until PID 1 reaps it, seconds where PID 1 reaps late). /proc
# first: kill -0 fails for someone else's process, and status may be asked
# by any user. The state is read once, and only a state read says alive: a
# zombie reaped between a check that its file exists and the read of it
# must not pass for a running process.
alive() {
	ident "$1" >/dev/null
}

# supervisor PID: the process is this script's supervisor, alive. A stale
# pid file (its supervisor killed with SIGKILL, or a pid file that outlived
# a reboot) may name an unrelated process now, which status must not call
# the service, start must not take for it, and stop must not signal. The
# supervisor's argv, read once from /proc (a zombie's is empty), ends with
# "$self" _supervise, after the shell that runs the script (or setsid, on
# its way to it): start ran setsid "$self" _supervise. A process in the
# middle of an exec has an empty argv for a moment (the kernel has given it
# its new memory, not yet its arguments), as the supervisor has on its way
# through setsid: its argv is read again a little later, up to three times
# (a kernel thread's stays empty). Read once, a start that came just then
# took the supervisor for gone and started a second one. Without /proc,
# alive (kill -0) is all there is.
supervisor() {
	alive "$1" || return 1
	[ -d /proc/self ] || return 0
	supervisor_try=0
	while :; do
		supervisor_argv=$(tr '\0' '\n' 2>/dev/null <"/proc/$1/cmdline")
		[ -z "$supervisor_argv" ] && [ "$supervisor_try" -lt 3 ] && alive "$1" || break
		supervisor_try=$((supervisor_try + 1))
		sleep 0.1
	done
	case "$supervisor_argv" in
	*"$nl$self$nl"_supervise) return 0 ;;
	esac
	return 1
}

# running: the pid file names this script's supervisor; sets pid.
running() {
	[ -f "$pid_file" ] || return 1
	pid=$(cat "$pid_file" 2>/dev/null)
	case "$pid" in
	[1-9]*) supervisor "$pid" ;;
	*) return 1 ;;
	esac
}

# ident PID: the pid and, from /proc, the start time of a live process (not
# a zombie; alive above): a pid reused by another process since, after a
# reboot say, has another start time. The stat file is read once.
ident() {
	if [ -d /proc/self ]; then
		ident_stat=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1,20)
		case "$ident_stat" in
		[!Z]" "[0-9]*) echo "$1 ${ident_stat#* }" ;;
		*) return 1 ;;
		esac
	else
		kill -0 "$1" 2>/dev/null && echo "$1"
	fi
}

# held IDENT: the process of a lock's ident still runs.
held() {
	[ "$(ident "${1%% *}")" = "$1" ]
}

# lock: start and stop hold lock_file while they run, so that two starts at
# once do not both start a supervisor (only one of which stop would stop),
# nor a stop and a start cross. flock(1) is not everywhere: the lock is a
# file linked into place (ln fails if it exists), which names its holder's
# ident. A holder gone without removing it (killed with SIGKILL, or before
# a reboot) is taken over: whoever creates lock_file.PID (ln again) replaces
# a lock_file still naming that dead PID; that file, left by a taker killed
# in turn, is taken over the same way, one level down. A live holder (a
# stop, which takes up to stop_timeout) is waited for, with a bound.
lock() {
	if ! lock_me=$(ident $$); then
		echo "$name: cannot read this process's state in /proc" >&2
		exit 1
	fi
	lock_new=$lock_file.$$.new
	trap 'rm -f "$lock_new"' EXIT
	trap 'exit 1' HUP INT TERM
	echo "$lock_me" >"$lock_new" || exit 1
	i=0
	until lock_take; do
		if [ "$i" -ge $(((stop_timeout + 10) * 10)) ]; then
			echo "$name: another start or stop holds $lock_file ($(cat "$lock_file" 2>/dev/null)); giving up" >&2
			exit 1
		fi
		sleep 0.1
		i=$((i + 1))
	done
	trap 'rm -f "$lock_file"' EXIT
	rm -f "$lock_new"
}

# lock_take: one try at lock; 1 if a live process holds it.
lock_take() {
	lock_at=$lock_file
	until ln "$lock_new" "$lock_at" 2>/dev/null; do
		lock_holder=$(cat "$lock_at" 2>/dev/null)
		case "$lock_holder" in
		[1-9]*) ;;
		*) return 1 ;; # released meanwhile
		esac
		! held "$lock_holder" || return 1
		lock_at=$lock_at.${lock_holder%% *}
	done
	# lock_at names this process; below lock_file, it is the right to
	# replace the file above it if that still names the dead holder.
	while [ "$lock_at" != "$lock_file" ]; do
		lock_up=${lock_at%.*}
		lock_holder=$(cat "$lock_up" 2>/dev/null)
		if [ "${lock_holder%% *}" != "${lock_at##*.}" ] || held "$lock_holder" ||
			! { echo "$lock_me" >"$lock_new.up" && mv -f "$lock_new.up" "$lock_up"; }; then
			rm -f "$lock_at" "$lock_new.up"
			return 1
		fi
		rm -f "$lock_at"
		lock_at=$lock_up
	done
}

case "$1" in
start)
	lock
	if running; then
		echo "$name is already running (pid $pid)"
		exit 0
	fi
	(umask 027 && : >>"$log_file") || exit 1
	# A session of its own: away from the caller's terminal and its signals.
	setsid "$self" _supervise </dev/null >>"$log_file" 2>&1 &
	pid=$!
	echo "$pid" >"$pid_file"
	# The lock is released once the pid is the supervisor's (the shell
	# forked for it has run setsid): a start waiting for it finds it running.
	i=0
	until supervisor "$pid"; do
		if [ "$i" -ge 100 ] || ! alive "$pid"; then
			kill -TERM "$pid" 2>/dev/null
			rm -f "$pid_file"
			echo "$name did not start; see $log_file" >&2
			exit 1
		fi
		sleep 0.1
		i=$((i + 1))
	done
	echo "Started $name (pid $pid)"
	;;
_supervise)
	# Runs the service, and again restart_delay seconds after it exits, until
	# SIGTERM: that is passed on to the service, which is waited for.
	child=
	stopping=
	trap 'stopping=1; [ -z "$child" ] || kill -TERM "$child" 2>/dev/null' TERM INT
	while [ -z "$stopping" ]; do
		run &
		child=$!
		[ -z "$stopping" ] || kill -TERM "$child" 2>/dev/null
		code=0
		wait "$child" 2>/dev/null || code=$? # not the shell's "Killed"
		while alive "$child"; do wait "$child" 2>/dev/null || code=$?; done
		child=
		[ -z "$stopping" ] || break
		note="$name exited with status $code; starting it again in $restart_delay seconds"
		# In the format of the service's own log: a JSON record after one
		# (log_format json), so that every line of the file parses.
		if tail -n 1 "$log_file" 2>/dev/null | grep -q '^{'; then
			echo "{\"time\":\"$(date -u '+%Y-%m-%dT%H:%M:%SZ')\",\"level\":\"WARN\",\"msg\":\"$note\"}"
		else
			echo "$(date '+%Y-%m-%dT%H:%M:%S%z') $note"
		fi
		sleep "$restart_delay" &
		sleeper=$!
		wait "$sleeper" || kill "$sleeper" 2>/dev/null
	done
	exit 0
	;;
stop)
	lock
	if ! running; then
		rm -f "$pid_file"
		echo "$name is not running"
		exit 0
	fi
	echo "Stopping $name (pid $pid); running work gets up to $stop_timeout seconds to finish"
	kill -TERM "$pid"
	i=0
	while alive "$pid"; do
		if [ "$i" -ge $((stop_timeout * 10)) ]; then
			echo "$name did not stop within $stop_timeout seconds; killing its session"
			pkill -KILL -s "$pid" 2>/dev/null || kill -KILL -- "-$pid" 2>/dev/null
			break
		fi
		sleep 0.1
		i=$((i + 1))
	done
	rm -f "$pid_file"
	echo "Stopped $name"
	;;
restart|force-reload)
	"$self" stop && "$self" start
	;;
status)
	if running; then
		echo "$name is running (pid $pid)"
		exit 0
	fi
	if [ -f "$pid_file" ]; then
		echo "$name is not running, but its pid file $pid_file exists"
		exit 1
	fi
	echo "$name is not running"
	exit 3
	;;
*)
	echo "usage: $0 start|stop|restart|force-reload|status" >&2
	exit 2
	;;
esac
exit 0
`
