package server_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestOverlongAccountNameIsRefusedWithoutBeingEchoed: a call naming an
// account with a name of 1 MiB gets InvalidArgument quoting only the
// start of the name and its length, not the megabyte back (in the status,
// so in a header that a client may refuse as too large), and others are
// served.
func TestOverlongAccountNameIsRefusedWithoutBeingEchoed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	caller := e.callerClient()
	long := strings.Repeat("a", 1<<20)
	_, err := caller.Submit(context.Background(), &automatorv1.ExecuteRequest{Account: long, Command: &automatorv1.Command{Script: "x"}})
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "not a valid account name") || !strings.Contains(st.Message(), "1048576 bytes") {
		t.Fatalf("submit to a 1 MiB account name: %.300v; want InvalidArgument naming its length", err)
	}
	if n := len(st.Message()); n > 1024 {
		t.Fatalf("the error is %d bytes: it echoes the name", n)
	}
	_, err = caller.ListInstances(context.Background(), &automatorv1.ListInstancesRequest{Account: long})
	if n := len(status.Convert(err).Message()); status.Code(err) != codes.InvalidArgument || n > 1024 {
		t.Fatalf("listing the instances of a 1 MiB account name: %v, a %d-byte message; want InvalidArgument, short", status.Code(err), n)
	}
	_, err = caller.Submit(context.Background(), &automatorv1.ExecuteRequest{Account: "Not An Account", Command: &automatorv1.Command{Script: "x"}})
	if !strings.Contains(status.Convert(err).Message(), `account "Not An Account" is not a valid account name`) {
		t.Fatalf("a short name that is not valid: %v; want it quoted whole", err)
	}
	submit(t, caller, e.account, 0) // still serving
}
