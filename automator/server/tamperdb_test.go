package server_test

import (
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/automator/server"
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

// TestAUnitSetToSucceededInTheDatabaseIsNotToldAsASuccess: the sealed
// result binds a unit, its account and the direction, not its state. A
// unit whose row says succeeded while its result is missing, or says its
// proxy could not run the command, was altered in the database (no proxy's
// result records that): Get and Wait answer DATA_LOSS saying so, with the
// unit's status and no result as the detail; the listing's outcome and
// OpenResult (the dashboard, work show) fail alike, so none tells it as a
// success with exit code 0 (a review: a failed unit, and one never run,
// set to succeeded in the database were). The other units are served as
// before, and a proxy may not post a failure as SUCCEEDED.
func TestAUnitSetToSucceededInTheDatabaseIsNotToldAsASuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{pollWindow: time.Hour})
	ctx := t.Context()
	api, px := e.callerClient(), e.proxyClient()
	end := func(outcome automatorv1.Outcome, r *automatorv1.Result) (*automatorv1.WorkStatus, error) {
		t.Helper()
		u := submit(t, api, e.account, time.Hour)
		c := claimOne(t, px, "a")
		_, err := px.Complete(ctx, &automatorv1.CompleteRequest{WorkId: c.GetWorkId(), ClaimId: c.GetClaimId(), InstanceId: "a",
			Outcome: outcome, SealedResult: e.sealResult(c.GetWorkId(), r)})
		return u, err
	}
	failure := &automatorv1.Result{Failure: "script outside the scripts directory"}
	failed, err := end(automatorv1.Outcome_OUTCOME_FAILED, failure)
	if err != nil {
		t.Fatal(err)
	}
	emptied, err := end(automatorv1.Outcome_OUTCOME_SUCCEEDED, &automatorv1.Result{Stdout: []byte("ran")})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := end(automatorv1.Outcome_OUTCOME_SUCCEEDED, &automatorv1.Result{ExitCode: 3})
	if err != nil {
		t.Fatal(err)
	}
	never := submit(t, api, e.account, time.Hour)
	db, err := sql.Open("sqlite", "file:"+e.dbPath+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []struct {
		sql string
		id  string
	}{
		{`UPDATE work SET state = 'succeeded', reason = '' WHERE id = ?`, failed.GetWorkId()},
		{`UPDATE work SET sealed_result = NULL WHERE id = ?`, emptied.GetWorkId()},
		{`UPDATE work SET state = 'succeeded', claimed_at = queued_at, finished_at = queued_at, instance_id = 'a' WHERE id = ?`, never.GetWorkId()},
	} {
		if _, err := db.Exec(q.sql, q.id); err != nil {
			t.Fatal(err)
		}
	}

	for _, tc := range []struct {
		name, id, says string
	}{
		{"a failed unit set to succeeded", failed.GetWorkId(), "its sealed result says its proxy could not run the command"},
		{"a succeeded unit whose result was removed", emptied.GetWorkId(), "holds no result"},
		{"a queued unit set to succeeded", never.GetWorkId(), "holds no result"},
	} {
		_, getErr := api.Get(ctx, &automatorv1.GetRequest{WorkId: tc.id})
		_, waitErr := api.Wait(ctx, &automatorv1.WaitRequest{WorkId: tc.id})
		for call, err := range map[string]error{"Get": getErr, "Wait": waitErr} {
			if status.Code(err) != codes.DataLoss || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "its outcome is unknown") {
				t.Errorf("%s: %s: %v; want DataLoss saying %q and that its outcome is unknown", tc.name, call, err, tc.says)
				continue
			}
			if w, ok := client.UnreadableWork(err); !ok || w.ID != tc.id || w.Result != nil {
				t.Errorf("%s: %s: the refusal's detail: %+v, %v; want the unit without a result", tc.name, call, w, ok)
			}
		}
		w, err := e.store.WorkGet(ctx, tc.id)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := e.srv.OpenResult(ctx, w); !errors.Is(err, server.ErrResultContradicted) || r != nil {
			t.Errorf("%s: OpenResult: %v, %v; want ErrResultContradicted", tc.name, r, err)
		}
		if o, err := e.srv.ListedOutcome(ctx, w); !errors.Is(err, server.ErrResultContradicted) || o != nil {
			t.Errorf("%s: ListedOutcome: %+v, %v; want ErrResultContradicted", tc.name, o, err)
		}
	}
	if st, err := api.Get(ctx, &automatorv1.GetRequest{WorkId: kept.GetWorkId()}); err != nil || st.GetResult().GetExitCode() != 3 {
		t.Errorf("a unit left as it was: %v, %v; want it served, exit code 3", st, err)
	}

	// A proxy's failure posted as a success is refused, and the unit
	// stays claimed for the proxy to post it as it is.
	if _, err := end(automatorv1.Outcome_OUTCOME_SUCCEEDED, failure); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "post it as FAILED") {
		t.Errorf("a result saying the command could not run, posted as SUCCEEDED: %v; want InvalidArgument", err)
	}
}

// TestASubmitToAnAccountWhoseKeyDoesNotOpenIsDataLoss: an account whose
// sealed key was altered in the database (or copied from another
// account's row) cannot have a unit sealed: the submit is refused with
// DATA_LOSS saying so and that nothing was queued, not an internal error
// (a review), and nothing is queued.
func TestASubmitToAnAccountWhoseKeyDoesNotOpenIsDataLoss(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	db, err := sql.Open("sqlite", "file:"+e.dbPath+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The current key's last byte changed.
	if _, err := db.Exec(`UPDATE accounts SET sealed_key = CAST(substr(sealed_key, 1, length(sealed_key) - 1) || CASE WHEN substr(sealed_key, -1) = x'00' THEN x'01' ELSE x'00' END AS BLOB) WHERE name = ?`, e.account); err != nil {
		t.Fatal(err)
	}
	_, err = e.callerClient().Submit(t.Context(), &automatorv1.ExecuteRequest{Account: e.account, Command: &automatorv1.Command{Script: "x.sh"}})
	if status.Code(err) != codes.DataLoss || !strings.Contains(err.Error(), "its key does not open with this automator's master key") || !strings.Contains(err.Error(), "nothing was queued") {
		t.Fatalf("submit to an account whose key does not open: %v; want DataLoss saying so", err)
	}
	if n, err := e.store.WorkQueuedCount(t.Context(), e.account, 10); err != nil || n != 0 {
		t.Errorf("units queued: %d, %v; want none", n, err)
	}
}
