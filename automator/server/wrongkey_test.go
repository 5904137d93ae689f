package server_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/crypto"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestAnInstanceHoldingAnotherAccountsKeyIsRefusedAndClaimsNothing: an
// instance whose profile holds another account's key line (the same key
// id, 1, as every account's first key) passes the key id check; its key
// check tells it apart. Its poll is refused FAILED_PRECONDITION with a
// message naming the instance, the key id and the account, it claims
// nothing, the unit queued meanwhile is claimed by a healthy instance,
// and the listing shows it refused for a wrong key.
func TestAnInstanceHoldingAnotherAccountsKeyIsRefusedAndClaimsNothing(t *testing.T) {
	t.Parallel()
	log := &syncLog{}
	e := newEnv(t, envOptions{log: log})
	_, otherKey := e.addAccount("other")
	if otherKey.ID != e.key.ID {
		t.Fatalf("the other account's key id is %d, want %d", otherKey.ID, e.key.ID)
	}
	px := e.proxyClient()
	ctx := context.Background()

	st, err := e.callerClient().Submit(ctx, &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{Script: "x.sh"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = px.Poll(ctx, &automatorv1.PollRequest{InstanceId: "wrong", MaxUnits: 4, Wait: durationpb.New(0),
		KeyIds: []uint32{otherKey.ID}, KeyChecks: [][]byte{crypto.KeyCheck(otherKey)}})
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(msg, `instance "wrong"`) || !strings.Contains(msg, "key id 1") ||
		!strings.Contains(msg, `account "`+e.account+`"`) || !strings.Contains(msg, "another account's key, or a mistyped one") ||
		!strings.Contains(msg, "install the account's profile") {
		t.Fatalf("poll holding another account's key: %v; want FAILED_PRECONDITION naming the instance, key id 1, the account and the fix", err)
	}
	if s := e.stateOf(st.GetWorkId()); s != automatorv1.State_STATE_QUEUED {
		t.Fatalf("the unit is %v after the refused poll, want queued: the refused instance claimed it", s)
	}
	// A healthy instance claims it.
	resp, err := px.Poll(ctx, &automatorv1.PollRequest{InstanceId: "good", MaxUnits: 4, Wait: durationpb.New(0),
		KeyIds: []uint32{e.key.ID}, KeyChecks: [][]byte{crypto.KeyCheck(e.key)}})
	if err != nil || len(resp.GetClaims()) != 1 || resp.GetClaims()[0].GetWorkId() != st.GetWorkId() {
		t.Fatalf("healthy instance's poll: %v, %v; want the unit claimed and the account named", resp, err)
	}
	if cmd := e.openCommand(resp.GetClaims()[0]); cmd.GetScript() != "x.sh" {
		t.Fatalf("healthy instance's command: %v", cmd)
	}
	list := e.instancesListed()
	wrong, good := list["wrong"], list["good"]
	if wrong == nil || !wrong.GetRefused() || wrong.GetOnline() || wrong.GetRefusedCause() != automatorv1.RefusedCause_REFUSED_CAUSE_WRONG_KEY ||
		len(wrong.GetRefusedKeyIds()) != 1 || wrong.GetRefusedKeyIds()[0] != 1 || wrong.GetInFlight() != 0 {
		t.Errorf("the instance holding another account's key is listed %v; want refused, REFUSED_CAUSE_WRONG_KEY, key ids [1], nothing in flight", wrong)
	}
	if good == nil || good.GetRefused() || !good.GetOnline() {
		t.Errorf("the healthy instance is listed %v; want online", good)
	}
	log.awaitLines(t, "the warning of the wrong key", "WARN", "not its account's key of that id", "instance_id=wrong", "key_id=1")

	// Its profile replaced: accepted, no longer refused.
	if _, err := px.Poll(ctx, &automatorv1.PollRequest{InstanceId: "wrong", MaxUnits: 4, Wait: durationpb.New(0),
		KeyIds: []uint32{e.key.ID}, KeyChecks: [][]byte{crypto.KeyCheck(e.key)}}); err != nil {
		t.Fatalf("poll with the account's key: %v", err)
	}
	if in := e.instancesListed()["wrong"]; in.GetRefused() || in.GetRefusedCause() != automatorv1.RefusedCause_REFUSED_CAUSE_UNSPECIFIED {
		t.Errorf("after a poll with the account's key the instance is listed %v; want not refused", in)
	}
}

// TestKeyChecksAreValidated: key_checks lists one check per key id, or
// none; each is bounded.
func TestKeyChecksAreValidated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	px := e.proxyClient()
	check := crypto.KeyCheck(e.key)
	for name, req := range map[string]*automatorv1.PollRequest{
		"more checks than key ids":  {KeyIds: []uint32{1}, KeyChecks: [][]byte{check, check}},
		"fewer checks than key ids": {KeyIds: []uint32{1, 2}, KeyChecks: [][]byte{check}},
		"checks without key ids":    {KeyChecks: [][]byte{check}},
		"a check too long":          {KeyIds: []uint32{1}, KeyChecks: [][]byte{bytes.Repeat([]byte{1}, 33)}},
	} {
		req.InstanceId = "a"
		req.Wait = durationpb.New(0)
		if _, err := px.Poll(context.Background(), req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", name, err)
		}
	}
}

// TestAPollWithoutKeyChecksIsServedAsBefore: a proxy predating key checks
// is not checked, whatever key it holds under the account's key id.
func TestAPollWithoutKeyChecksIsServedAsBefore(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	st, err := e.callerClient().Submit(ctx, &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{Script: "x.sh"}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.proxyClient().Poll(ctx, &automatorv1.PollRequest{InstanceId: "old", MaxUnits: 4, Wait: durationpb.New(0), KeyIds: []uint32{1}})
	if err != nil || len(resp.GetClaims()) != 1 || resp.GetClaims()[0].GetWorkId() != st.GetWorkId() {
		t.Fatalf("poll without key checks: %v, %v; want the unit claimed", resp, err)
	}
	if in := e.instancesListed()["old"]; in.GetRefused() || !in.GetOnline() {
		t.Errorf("instance polling without key checks listed %v; want online", in)
	}
}

// TestAKeyCheckAtItsBoundIsCheckedNotRefused: a key check may be up to 32
// bytes (room for a longer one than today's 16); one of 32 bytes is
// compared with the account's key's, and refused as a wrong key, not as
// malformed.
func TestAKeyCheckAtItsBoundIsCheckedNotRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	_, err := e.proxyClient().Poll(context.Background(), &automatorv1.PollRequest{InstanceId: "a", Wait: durationpb.New(0),
		KeyIds: []uint32{e.key.ID}, KeyChecks: [][]byte{bytes.Repeat([]byte{1}, 32)}})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("a poll with a key check of 32 bytes: %v, want FAILED_PRECONDITION (a wrong key)", err)
	}
}
