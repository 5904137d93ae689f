package server

import (
	"context"
	"errors"

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
func (s *Server) OpenResult(ctx context.Context, w store.Work) (*automatorv1.Result, error) {
	if len(w.SealedResult) == 0 {
		return nil, nil
	}
	return s.openResult(ctx, w, w.SealedResult)
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
