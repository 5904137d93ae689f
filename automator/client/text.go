package client

import (
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// checkText refuses, with InvalidArgument naming the field, what gRPC
// could not send: the account, the script's name, its arguments and its
// environment travel as protobuf strings, which are UTF-8, and gRPC's own
// refusal ("error while marshaling: string field contains invalid UTF-8",
// Internal) names none of them. Stdin is bytes and takes anything.
func checkText(account string, cmd Command, o callOptions) error {
	refuse := func(what string) error {
		return status.Errorf(codes.InvalidArgument, "%s is not valid UTF-8: the API carries it as text (send other bytes on stdin)", what)
	}
	if !utf8.ValidString(account) {
		return refuse("the account name")
	}
	if !utf8.ValidString(cmd.Script) {
		return refuse("command.script")
	}
	for i, a := range cmd.Args {
		if !utf8.ValidString(a) {
			return refuse(fmt.Sprintf("command.args[%d]", i))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(o.env)) {
		if !utf8.ValidString(k) {
			return refuse("command.env: a variable name")
		}
		if !utf8.ValidString(o.env[k]) {
			return refuse("command.env: the value of " + k)
		}
	}
	if !utf8.ValidString(o.key) {
		return refuse("the idempotency key")
	}
	return nil
}

// checkWorkID refuses a work id that is not UTF-8, which the API cannot
// carry, as checkText does the fields of a submit.
func checkWorkID(id string) error {
	if !utf8.ValidString(id) {
		return status.Errorf(codes.InvalidArgument, "work id %q is not valid UTF-8: no unit has such an id", id)
	}
	return nil
}
