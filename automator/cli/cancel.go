package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/opsgate/opsgate/automator/client"
)

// ExitSomeIDRefused is `work cancel`'s exit code when one of the given ids
// was malformed or refused by the automator (unknown, say): every other id
// was still cancelled, or had already ended.
const ExitSomeIDRefused = 1

// cancelJSON is a unit after `work cancel`: work wait's fields, then what
// this call found and did.
type cancelJSON struct {
	waitJSON
	// PreviousState is the state the call found the unit in.
	PreviousState string `json:"previous_state"`
	// CancelledByThisCall: the unit was open and this call cancelled it.
	// False when it had already ended, cancelled included.
	CancelledByThisCall bool `json:"cancelled_by_this_call"`
}

// cmdWorkCancel cancels each given unit that is queued or claimed (a
// claimed unit's proxy kills its script) and prints every unit as it is
// after the call, without its output. An id that is malformed or refused
// (unknown, another account's for a scoped API key) is reported as work
// wait reports it (refusedIDs): one line on stderr, in the order given,
// before the error when the command then fails, and a refusedJSON in its
// place with --json; the other ids are still cancelled. It exits 0 when
// every unit is now cancelled or had already ended, ExitSomeIDRefused when
// an id was refused, and ExitError (through Main) when the command itself
// failed: its flags, or the automator unreachable or refusing the API key.
// It then prints the ids it got to first; the ids after the failing one
// are left alone, and those malformed among them reported. An id given
// more than once is cancelled once, and listed each time as this call
// found and left it.
func cmdWorkCancel(ctx context.Context, args []string, env Env) (int, error) {
	ids, asJSON, c, explain, err := unitsCommand("work cancel", args, env)
	if err != nil {
		return 0, err
	}
	defer c.Close()

	units := make([]*cancelJSON, len(ids)) // nil: refused, or not got to
	refused := checkIDs("cancelling", ids) // a malformed id is reported even past an error
	var failed error
	seen := map[string]int{} // id: where it was given first
	for i, id := range ids {
		if refused[i] != nil {
			continue
		}
		if j, ok := seen[id]; ok {
			// Given again: cancelled once, and both say what this call
			// found and did (not "already cancelled" the second time).
			units[i], refused[i] = units[j], refused[j]
			continue
		}
		seen[id] = i
		v, err := cancelOne(ctx, c, id)
		if refused.take(i, err) {
			continue
		}
		if err != nil {
			failed = err // the ids after it are left alone
			break
		}
		units[i] = &v
	}
	code := 0
	if refused.report(env.Stderr) {
		code = ExitSomeIDRefused
	}
	if failed != nil {
		_ = printCancelled(env.Stdout, ids, units, refused, asJSON) // what was done before, then the error
		return 0, explain(failed)
	}
	return code, printCancelled(env.Stdout, ids, units, refused, asJSON)
}

// cancelOne cancels unit id unless it has ended, and returns it as it is
// after the call. It reads the unit first, since Cancel answers the same
// for a unit it cancelled and for one already cancelled; a unit cancelled
// by another caller between the two calls reads as cancelled by this one.
func cancelOne(ctx context.Context, c *client.Client, id string) (cancelJSON, error) {
	before, err := c.Get(ctx, id)
	if ended, ok := client.UnreadableWork(err); ok {
		// Ended, with a result of an account deleted since, or one
		// altered in the database: done.
		before, err = ended, nil
	}
	w := before
	if err == nil && !before.State.Terminal() {
		w, err = c.Cancel(ctx, id)
	}
	if err != nil {
		return cancelJSON{}, refusal("cancelling", id, err)
	}
	if !w.State.Terminal() {
		return cancelJSON{}, fmt.Errorf("cancelling work %s: the automator answered with the unit %s, not ended", id, w.State)
	}
	v := cancelJSON{
		waitJSON:            waitJSON{ID: w.ID, Account: w.Account, State: string(w.State), InstanceID: w.InstanceID, Reason: w.Reason},
		PreviousState:       string(before.State),
		CancelledByThisCall: !before.State.Terminal() && w.State == client.StateCancelled,
	}
	if w.State == client.StateSucceeded && w.Result != nil {
		v.ExitCode = &w.Result.ExitCode
	}
	return v, nil
}

// printCancelled writes the units as a table, or, with the refused ids in
// their places, as a JSON array. The table is left out when there is no
// unit; the array is written even empty (the first call failed), so a
// script reading it gets JSON.
func printCancelled(w io.Writer, ids []string, units []*cancelJSON, refused refusedIDs, asJSON bool) error {
	if asJSON {
		return writeJSON(w, refused.listed(ids, func(i int) (any, bool) { return units[i], units[i] != nil }))
	}
	var out []*cancelJSON
	for _, v := range units {
		if v != nil {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return nil
	}
	t := table(w)
	fmt.Fprintln(t, "WORK ID\tACCOUNT\tSTATE\tEXIT\tCLAIMER\tTHIS CALL\tREASON")
	var reasons reasonColumn
	for _, v := range out {
		exit := "-"
		if v.ExitCode != nil {
			exit = fmt.Sprint(*v.ExitCode)
		}
		did := "already " + strings.ReplaceAll(v.State, "_", " ")
		if v.CancelledByThisCall {
			did = "cancelled it (was " + v.PreviousState + ")"
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.ID, v.Account, v.State, exit, orDash(v.InstanceID), did,
			reasons.cell(v.Reason, v.Account, v.InstanceID))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	// Every unit listed has ended: waiting for it answers at once.
	return reasons.note(w, "`automator work wait ID... --json`")
}
