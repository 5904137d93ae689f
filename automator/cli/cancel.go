package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/automator/store"
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

// refusedID is an error about one given id (malformed, unknown, not the
// API key's): it is reported, and the other ids are still cancelled.
type refusedID struct {
	msg    string // "cancelling work ID: " and why
	reason string // why
}

func (e *refusedID) Error() string { return e.msg }

// refuse is the refusedID of id for doing ("cancelling", "waiting for"),
// given why; a malformed id is quoted.
func refuse(doing, id, why string) *refusedID {
	shown := id
	if !store.ValidWorkID(id) {
		shown = fmt.Sprintf("%q", id)
	}
	return &refusedID{msg: fmt.Sprintf("%s work %s: %s", doing, shown, why), reason: why}
}

// notAWorkID is why a malformed id is refused.
const notAWorkID = "not a work id (w_ and 32 lowercase hex digits, as work list shows them)"

// cmdWorkCancel cancels each given unit that is queued or claimed (a
// claimed unit's proxy kills its script) and prints every unit as it is
// after the call, without its output. It exits 0 when every unit is now
// cancelled or had already ended, ExitSomeIDRefused when an id was
// refused, and ExitError (through Main) when the command itself failed:
// its flags, or the automator unreachable or refusing the API key. It
// then prints the units it got to first.
func cmdWorkCancel(ctx context.Context, args []string, env Env) (int, error) {
	ids, asJSON, c, explain, err := unitsCommand("work cancel", args, env)
	if err != nil {
		return 0, err
	}
	defer c.Close()

	code := 0
	out := []cancelJSON{}
	for _, id := range ids {
		v, err := cancelOne(ctx, c, id)
		var refused *refusedID
		if errors.As(err, &refused) {
			fmt.Fprintf(env.Stderr, "automator: %v\n", refused)
			code = ExitSomeIDRefused
			continue
		}
		if err != nil {
			if len(out) > 0 {
				_ = printCancelled(env.Stdout, out, asJSON) // what was done before, then the error
			}
			return 0, explain(err)
		}
		out = append(out, v)
	}
	return code, printCancelled(env.Stdout, out, asJSON)
}

// cancelOne cancels unit id unless it has ended, and returns it as it is
// after the call. It reads the unit first, since Cancel answers the same
// for a unit it cancelled and for one already cancelled; a unit cancelled
// by another caller between the two calls reads as cancelled by this one.
func cancelOne(ctx context.Context, c *client.Client, id string) (cancelJSON, error) {
	if !store.ValidWorkID(id) {
		return cancelJSON{}, refuse("cancelling", id, notAWorkID)
	}
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

// refusal turns the automator's refusal of id itself into a refusedID
// whose message starts with doing ("cancelling", "waiting for"); any other
// error (no automator answered, the API key refused, the context ended) is
// returned as it is and ends the command.
func refusal(doing, id string, err error) error {
	switch status.Code(err) {
	case codes.NotFound:
		// An unknown id, or, for a scoped API key, another account's unit:
		// the automator answers both alike.
		return refuse(doing, id, "there is no such unit (unknown id, deleted past work_retention, or of an account the API key may not use)")
	case codes.PermissionDenied, codes.FailedPrecondition, codes.InvalidArgument:
		// The server's words say why.
		return refuse(doing, id, status.Convert(err).Message())
	}
	return err
}

// printCancelled writes the units as a table, or as a JSON array.
func printCancelled(w io.Writer, out []cancelJSON, asJSON bool) error {
	if asJSON {
		return writeJSON(w, out)
	}
	if len(out) == 0 {
		return nil
	}
	t := table(w)
	fmt.Fprintln(t, "WORK ID\tACCOUNT\tSTATE\tEXIT\tCLAIMER\tTHIS CALL\tREASON")
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
			orDash(shorten(v.Reason, maxReason)))
	}
	return t.Flush()
}
