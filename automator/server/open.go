package server

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// OpenCommand opens the sealed command of unit w with its account's key,
// for an operator allowed to see it (the dashboard).
func (s *Server) OpenCommand(ctx context.Context, w store.Work) (*automatorv1.Command, error) {
	return s.openCommand(ctx, w)
}

// OpenResult opens the sealed result of unit w; nil when it has none.
// A unit recorded succeeded whose result is missing or says its proxy
// could not run the command fails with ErrResultContradicted.
func (s *Server) OpenResult(ctx context.Context, w store.Work) (*automatorv1.Result, error) {
	if len(w.SealedResult) == 0 {
		return nil, contradicted(w, false, "")
	}
	r, err := s.openResult(ctx, w, w.SealedResult)
	if err == nil {
		err = contradicted(w, true, r.GetFailure())
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}

// ErrResultContradicted is the error of reading a unit recorded succeeded
// whose stored result is missing, or says that its proxy could not run the
// command. No proxy's result records that (Complete requires a result for
// SUCCEEDED and refuses one that carries a failure), so the unit's row was
// altered in the database: its outcome is unknown, and it is not told as a
// success (a review: a failed unit, or one never run, set to succeeded in
// the database was answered as a success, exit code 0). The sealed result
// binds the unit, its account and the direction, not its state.
var ErrResultContradicted = errors.New("altered in the database? its outcome is unknown")

// contradicted is ErrResultContradicted, saying what, for unit w whose
// stored result is there (has) and holds failure; nil when they agree.
func contradicted(w store.Work, has bool, failure string) error {
	switch {
	case w.State != store.StateSucceeded:
		return nil
	case !has:
		return fmt.Errorf("it is recorded succeeded but holds no result (%w)", ErrResultContradicted)
	case failure != "":
		return fmt.Errorf("it is recorded succeeded, but its sealed result says its proxy could not run the command (%w)", ErrResultContradicted)
	}
	return nil
}

// ErrCommandLost is the error of opening the command of a unit that
// `automator repair --salvage` kept in place of one whose row was lost:
// its command is gone (its reason says so).
var ErrCommandLost = errors.New("its command was lost with its row in a damaged database (automator repair --salvage kept the unit, ended; its reason says so)")

func (s *Server) openCommand(ctx context.Context, w store.Work) (*automatorv1.Command, error) {
	if len(w.SealedCommand) == 0 {
		return nil, ErrCommandLost
	}
	plain, err := s.open(ctx, w.Account, w.ID, crypto.DirCommand, w.SealedCommand)
	if err != nil {
		return nil, err
	}
	var c automatorv1.Command
	if err := proto.Unmarshal(plain, &c); err != nil {
		return nil, errors.New("sealed command holds no valid Command message")
	}
	return &c, nil
}
