package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestStoreErrorOfACallThatLeftIsNotAnInternalError: a store call that
// failed because its caller's context ended (a proxy stopping mid-claim)
// answers with the context's status and logs no error; the same error
// while the call is still wanted is an internal error, logged.
func TestStoreErrorOfACallThatLeftIsNotAnInternalError(t *testing.T) {
	var log bytes.Buffer
	s := &Server{log: slog.New(slog.NewTextHandler(&log, nil))}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := s.internal(ctx, "claiming work", fmt.Errorf("claiming: %w", context.Canceled))
	if status.Code(err) != codes.Canceled || log.Len() != 0 {
		t.Errorf("a store call cut short by its caller: %v, log %q; want Canceled and nothing logged", err, log.String())
	}
	err = s.internal(t.Context(), "claiming work", errors.New("disk I/O error"))
	if status.Code(err) != codes.Internal || !strings.Contains(log.String(), "level=ERROR") {
		t.Errorf("a store failure of a call still wanted: %v, log %q; want Internal and an error logged", err, log.String())
	}
}
