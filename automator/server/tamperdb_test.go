package server_test

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/crypto"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// alterBlob flips one ciphertext byte of column (sealed_command or
// sealed_result) of unit id in the database file, as someone with write
// access to it might.
func (e *env) alterBlob(column, id string, alter func([]byte)) {
	e.t.Helper()
	db, err := sql.Open("sqlite", "file:"+e.dbPath+"?_pragma=busy_timeout(10000)")
	if err != nil {
		e.t.Fatal(err)
	}
	defer db.Close()
	var blob []byte
	if err := db.QueryRow(`SELECT `+column+` FROM work WHERE id = ?`, id).Scan(&blob); err != nil {
		e.t.Fatal(err)
	}
	alter(blob)
	if _, err := db.Exec(`UPDATE work SET `+column+` = ? WHERE id = ?`, blob, id); err != nil {
		e.t.Fatal(err)
	}
}

// TestTamperedResultInTheDatabaseIsRefusedAsDataLoss: a stored result
// altered in the database does not open. A caller reading the unit (Get,
// Wait) gets DATA_LOSS saying so, never a byte of the plaintext, and the
// unit's status without its result as the answer's detail (the unit has
// ended: it stays as it ended), as for a result of a deleted account
// (client.UnreadableWork).
func TestTamperedResultInTheDatabaseIsRefusedAsDataLoss(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{pollWindow: time.Hour})
	ctx := t.Context()
	api, px := e.callerClient(), e.proxyClient()
	u := submit(t, api, e.account, time.Hour)
	c := claimOne(t, px, "a")
	if _, err := px.Complete(ctx, &automatorv1.CompleteRequest{WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(), InstanceId: "a",
		Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: e.sealResult(c.GetWorkId(), &automatorv1.Result{Stdout: []byte("SECRET-OUTPUT")})}); err != nil {
		t.Fatal(err)
	}
	e.alterBlob("sealed_result", u.GetWorkId(), func(b []byte) { b[len(b)/2] ^= 1 })

	_, getErr := api.Get(ctx, &automatorv1.GetRequest{WorkId: u.GetWorkId()})
	_, waitErr := api.Wait(ctx, &automatorv1.WaitRequest{WorkId: u.GetWorkId()})
	for name, err := range map[string]error{"Get": getErr, "Wait": waitErr} {
		if status.Code(err) != codes.DataLoss || !strings.Contains(err.Error(), "does not open") || strings.Contains(err.Error(), "SECRET") {
			t.Errorf("%s of a unit whose stored result was altered: %v; want DataLoss saying it does not open, without its plaintext", name, err)
			continue
		}
		w, ok := client.UnreadableWork(err)
		if !ok || w.ID != u.GetWorkId() || w.State != client.StateSucceeded || w.Result != nil {
			t.Errorf("%s: the refusal's detail: %+v, %v; want the unit, succeeded, without its result", name, w, ok)
		}
	}
}

// TestTamperedCommandInTheDatabaseEndsItsUnit: a stored command altered
// in the database (a ciphertext byte, or the key id of its header) is
// still handed to the instance that claims it (a claim made is never
// taken back), which cannot open it and reports the unit failed: it ends,
// and nothing of the command is anywhere in the answers.
func TestTamperedCommandInTheDatabaseEndsItsUnit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{pollWindow: time.Hour})
	ctx := t.Context()
	api, px := e.callerClient(), e.proxyClient()
	for name, alter := range map[string]func([]byte){
		"a ciphertext byte": func(b []byte) { b[len(b)-1] ^= 1 },
		"the key id":        func(b []byte) { b[4] ^= 7 },
	} {
		u := submit(t, api, e.account, time.Hour)
		e.alterBlob("sealed_command", u.GetWorkId(), alter)
		c := claimOne(t, px, "a", e.key.ID)
		if _, err := crypto.Open(crypto.Keys{e.key}, c.GetAccount(), c.GetWorkId(), crypto.DirCommand, c.GetSealedCommand()); err == nil {
			t.Fatalf("%s altered: the command still opens", name)
		}
		if _, err := px.Complete(ctx, &automatorv1.CompleteRequest{WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(), InstanceId: "a",
			Outcome: automatorv1.Outcome_OUTCOME_FAILED, Failure: "the sealed command did not open"}); err != nil {
			t.Fatalf("%s altered: reporting the unit failed: %v", name, err)
		}
		if st := e.stateOf(u.GetWorkId()); st != automatorv1.State_STATE_FAILED {
			t.Errorf("%s altered: the unit is %v; want failed", name, st)
		}
	}
}
