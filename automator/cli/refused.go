package cli

import (
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/store"
)

// The ids given to a command on units (work wait, work cancel) that are
// refused, malformed or by the automator, are reported alike by both: one
// line each on stderr, in the order given, before the output and before
// the error that ends the command; with --json each is a refusedJSON in its
// place among the units; the command still does its work for the other ids
// and exits 1 (ExitNotAllSucceeded, ExitSomeIDRefused).

// refusedID is an error about one given id (malformed, unknown, not the
// API key's): it is reported, and the other ids are still handled.
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

// refusedJSON is a refused id in the --json array of work wait and work
// cancel, in its place among the units: the id as given and why, and no
// state, which tells it from a unit.
type refusedJSON struct {
	ID      string `json:"work_id"`
	Refused string `json:"refused"`
}

// refusedIDs are the refusals of the ids given, each in the id's place;
// nil for an id not refused.
type refusedIDs []*refusedID

// checkIDs refuses each of ids that is not a work id, for doing
// ("cancelling"), before any call: it is reported whatever becomes of the
// others, an error that ends the command included.
func checkIDs(doing string, ids []string) refusedIDs {
	r := make(refusedIDs, len(ids))
	for i, id := range ids {
		if !store.ValidWorkID(id) {
			r[i] = refuse(doing, id, notAWorkID)
		}
	}
	return r
}

// take records err as the refusal of the i-th id when it is one (a
// *refusedID), and reports whether it was.
func (r refusedIDs) take(i int, err error) bool {
	var ref *refusedID
	if !errors.As(err, &ref) {
		return false
	}
	r[i] = ref
	return true
}

// report writes one line on w for each refused id, in the order given,
// and tells whether there was one. It comes before the output, and before
// the error that ends the command.
func (r refusedIDs) report(w io.Writer) (any bool) {
	for _, ref := range r {
		if ref != nil {
			fmt.Fprintf(w, "automator: %v\n", ref)
			any = true
		}
	}
	return any
}

// listed is the --json array: every id in the order given, a refusedJSON
// when refused, else unit(i); an id unit has nothing for (the command did
// not get to it) is left out.
func (r refusedIDs) listed(ids []string, unit func(i int) (any, bool)) []any {
	out := []any{}
	for i, id := range ids {
		if r[i] != nil {
			out = append(out, refusedJSON{ID: id, Refused: r[i].reason})
		} else if v, ok := unit(i); ok {
			out = append(out, v)
		}
	}
	return out
}
