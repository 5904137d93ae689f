package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Table renders the report as the summary `make chaos` prints: the units
// and their ends, the two numbers that must be 0, and the faults injected
// by kind.
func (r Report) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| units | succeeded | failed | timed out | executed twice | lost |\n")
	fmt.Fprintf(&b, "|------:|----------:|-------:|----------:|---------------:|-----:|\n")
	fmt.Fprintf(&b, "| %d | %d | %d | %d | %d | %d |\n\n", r.Units, r.Succeeded, r.Failed, r.TimedOut, r.ExecutedTwice, r.Lost)

	fmt.Fprintf(&b, "| timed out because | units |\n|---|---:|\n")
	fmt.Fprintf(&b, "| the script ran past its deadline (on purpose; killed by its proxy) | %d |\n", r.TimedOutExpected)
	fmt.Fprintf(&b, "| its claimer was killed, paused, partitioned or had its connection cut | %d |\n", r.TimedOutClaimerFault)
	fmt.Fprintf(&b, "| the automator crashed while it was claimed | %d |\n", r.TimedOutAutomator)
	fmt.Fprintf(&b, "| no healthy instance could claim it in time | %d |\n\n", r.TimedOutUnclaimed)
	fmt.Fprintf(&b, "| failed because | units |\n|---|---:|\n")
	fmt.Fprintf(&b, "| its claim never reached its claimer (lost with its connection; the script did not run) | %d |\n\n", r.FailedUndelivered)

	fmt.Fprintf(&b, "| fault | injected |\n|---|---:|\n")
	kinds := make([]string, 0, len(r.FaultsByKind))
	total := 0
	for k, n := range r.FaultsByKind {
		kinds = append(kinds, k)
		total += n
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(&b, "| %s | %d |\n", k, r.FaultsByKind[k])
	}
	fmt.Fprintf(&b, "| **all** | %d |\n\n", total)

	fmt.Fprintf(&b, "| figure | value |\n|---|---:|\n")
	fmt.Fprintf(&b, "| script executions logged | %d |\n", r.Executions)
	fmt.Fprintf(&b, "| units alive across an automator crash (of which succeeded) | %d (%d) |\n", r.AcrossRestart, r.AcrossRestartSucceeded)
	fmt.Fprintf(&b, "| units queued while an instance was down, run by a survivor | %d |\n", r.PickedUpBySurvivors)
	fmt.Fprintf(&b, "| results accepted after their claimer was SIGKILLed (posted from its spool on restart) | %d |\n", r.SpooledAcrossRestart)
	fmt.Fprintf(&b, "| latest timeout after its deadline (automator up) | %s |\n", ms(r.MaxLate))
	fmt.Fprintf(&b, "| succeeded units, submit to result, p50 / p99 | %s / %s |\n", ms(r.LatencyP50), ms(r.LatencyP99))
	fmt.Fprintf(&b, "| slowest submit, first try to acknowledgement | %s |\n", ms(r.SlowestSubmit))
	fmt.Fprintf(&b, "| the test machine stood still (not injected): times, longest | %d, %s |\n", r.Stalls, ms(r.MaxStall))
	fmt.Fprintf(&b, "| guarantee violations | %d |\n", len(r.Violations))
	return b.String()
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }
