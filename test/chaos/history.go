package chaos

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// History is everything a chaos run recorded: what each caller asked and
// saw, what each script execution did, and which faults hit what, when.
type History struct {
	Units []Unit
	Execs []Exec
	// Faults are the faults injected, each with the instances it hit
	// (Automator for the automator) and when.
	Faults []Fault
	// Idle are intervals when an instance was deliberately not running
	// (a warm standby before it is started), which are not faults.
	Idle []Interval
	// Instances names every instance of the run.
	Instances []string
	// Replicas names the automator's replicas when several share one
	// PostgreSQL database (empty with one automator). A fault that targets
	// one replica is not an outage of the automator: the others serve on,
	// and their sweepers keep the deadlines. It explains the timeout of a
	// claimed unit (the poll answer or the result on its way through that
	// replica is lost with it), and a caller waiting on it learns of the end
	// late, once it waits again on another replica.
	Replicas []string
	// Stalls are intervals when the test machine itself stood still (the
	// harness's own timers fired late, or its wall clock ran ahead of its
	// monotonic clock across a pause of the virtual machine): every process
	// was frozen, so they count as an outage of everything.
	Stalls []Interval
}

// Automator names the automator among a fault's targets.
const Automator = "automator"

// Callers names the callers among a fault's targets: a fault of their
// connections to a replica.
const Callers = "callers"

// Machine names the whole test machine: what a stall freezes.
const Machine = "machine"

// Expect is what a unit should end as when nothing goes wrong.
type Expect int

const (
	// ExpectOutput: the script runs and the result carries WantStdout and
	// WantExit.
	ExpectOutput Expect = iota
	// ExpectFailed: the proxy cannot run the command (an unknown script),
	// reports failed and runs nothing.
	ExpectFailed
	// ExpectTimedOut: the script runs past the deadline; the proxy kills
	// it and reports nothing, so the unit times out.
	ExpectTimedOut
)

func (e Expect) String() string {
	switch e {
	case ExpectOutput:
		return "output"
	case ExpectFailed:
		return "failed"
	case ExpectTimedOut:
		return "timed_out"
	}
	return "?"
}

// Unit is what one caller asked and saw of one executeOnProxy call.
type Unit struct {
	Caller int
	Key    string // the idempotency key, unique per unit
	Expect Expect
	// WantStdout and WantExit are the result a run of the script gives
	// (ExpectOutput).
	WantStdout string
	WantExit   int
	Timeout    time.Duration

	SubmittedAt time.Time // first Submit attempt
	WorkID      string    // empty when no Submit was ever acknowledged
	AckedAt     time.Time // when the Submit was acknowledged
	SubmitErr   string    // the last Submit error when none was

	// What the terminal status the caller's Wait returned says.
	Seen       bool
	SeenAt     time.Time
	State      string // succeeded, failed, timed_out, cancelled
	Reason     string
	QueuedAt   time.Time
	Deadline   time.Time
	ClaimedAt  time.Time
	FinishedAt time.Time
	Claimer    string // the instance that claimed it, if any
	WaitErr    string // the last Wait error when no terminal status came

	// The result, when the proxy posted one.
	HasResult      bool
	ResultInstance string
	ExitCode       int
	Stdout         string

	// FinalState is the state a Get returned after the run ended.
	FinalState string
}

// Exec is one script execution, from the execution log.
type Exec struct {
	WorkID   string
	Instance string
	Start    time.Time
	End      time.Time // zero if the script never reached its end
}

// Fault is one injected fault.
type Fault struct {
	Kind    string
	Targets []string
	Start   time.Time
	End     time.Time // zero: instantaneous
	// WorkIDs are the units a cut concerned, when known.
	WorkIDs []string
	// State is the state a cut answer to a caller carried (a Wait's end,
	// the queued unit of a Submit): what the caller must still learn.
	State string
}

// Interval is a stretch of time for one instance.
type Interval struct {
	Who        string
	Start, End time.Time
}

// ParseExecLog reads an execution log. Each execution appends two short
// lines with one write each (O_APPEND): when it starts,
//
//	S WORK_ID INSTANCE START
//
// and when it ends,
//
//	E WORK_ID INSTANCE START END
//
// times in seconds since the epoch with a fraction. A start without an end
// is an execution killed before its end (at the deadline, or by a proxy
// crash). Lines that do not parse are an error: a torn write would hide an
// execution.
func ParseExecLog(r io.Reader) ([]Exec, error) {
	type key struct {
		id, instance, start string
	}
	var out []Exec
	index := map[key]int{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		bad := func(why string) error { return fmt.Errorf("execution log line %d %q: %s", n, line, why) }
		switch {
		case len(f) == 4 && f[0] == "S":
			start, err := epoch(f[3])
			if err != nil {
				return nil, bad(err.Error())
			}
			index[key{f[1], f[2], f[3]}] = len(out)
			out = append(out, Exec{WorkID: f[1], Instance: f[2], Start: start})
		case len(f) == 5 && f[0] == "E":
			end, err := epoch(f[4])
			if err != nil {
				return nil, bad(err.Error())
			}
			i, ok := index[key{f[1], f[2], f[3]}]
			if !ok {
				return nil, bad("an end without its start")
			}
			out[i].End = end
		default:
			return nil, bad("not S WORK INSTANCE START or E WORK INSTANCE START END")
		}
	}
	return out, sc.Err()
}

// epoch parses "SECONDS.FRACTION" (bash's $EPOCHREALTIME).
func epoch(s string) (time.Time, error) {
	sec, frac, _ := strings.Cut(s, ".")
	secs, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("time %q: %w", s, err)
	}
	var nanos int64
	if frac != "" {
		if len(frac) > 9 {
			frac = frac[:9]
		}
		nanos, err = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("time %q: %w", s, err)
		}
	}
	return time.Unix(secs, nanos), nil
}
