package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/closedport"
)

// TestStoreErrorOfACallThatLeftIsNotAnInternalError: a store call that
// failed because its caller's context ended (a proxy stopping mid-claim)
// answers with the context's status and logs no error; the same error
// while the call is still wanted is an internal error, logged.
func TestStoreErrorOfACallThatLeftIsNotAnInternalError(t *testing.T) {
	t.Parallel()
	var log bytes.Buffer
	s := bareServer(slog.New(slog.NewTextHandler(&log, nil)))
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

// TestAnUnreachableDatabaseIsUnavailable: a store call that failed because
// the database could not be reached (PostgreSQL restarting: its sessions
// ended with SQLSTATE 57P01, new ones refused or told 57P03) answers
// UNAVAILABLE, which callers and the client library retry, as they do when
// the automator itself is unreachable; not INTERNAL, on which they give up.
// TestChaosPG crashes and stops PostgreSQL under replicas and callers.
func TestAnUnreachableDatabaseIsUnavailable(t *testing.T) {
	t.Parallel()
	addr := closedport.Addr(t)
	_, refused := net.Dial("tcp", addr)
	if refused == nil {
		t.Fatalf("dialling the closed port %s succeeded", addr)
	}
	for _, storeErr := range []error{
		fmt.Errorf("enqueueing work: %w", &pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}),
		fmt.Errorf("getting work: %w", &pgconn.PgError{Severity: "FATAL", Code: "57P03", Message: "the database system is starting up"}),
		fmt.Errorf("getting work: failed to connect: %w", refused),
		fmt.Errorf("enqueueing work: %w", pgconn.ErrConnClosed),
		// A replica (or its link) stalled inside a transaction, which
		// PostgreSQL ended uncommitted.
		fmt.Errorf("enqueueing work: %w", &pgconn.PgError{Severity: "FATAL", Code: "25P03", Message: "terminating connection due to idle-in-transaction timeout"}),
	} {
		var log bytes.Buffer
		s := bareServer(slog.New(slog.NewTextHandler(&log, nil)))
		err := s.internal(t.Context(), "queueing work", storeErr)
		if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "database") {
			t.Errorf("store error %v: %v; want UNAVAILABLE saying the database is unreachable", storeErr, err)
		}
	}
	var log bytes.Buffer
	s := bareServer(slog.New(slog.NewTextHandler(&log, nil)))
	if err := s.internal(t.Context(), "queueing work", &pgconn.PgError{Code: "23505", Message: "duplicate key"}); status.Code(err) != codes.Internal {
		t.Errorf("a constraint violation: %v; want INTERNAL", err)
	}
}

// TestADatabaseOutOfConnectionsIsUnavailable: a store call that could not
// get a connection because PostgreSQL has too many (max_connections, or
// the role's CONNECTION LIMIT: SQLSTATE 53300) answers UNAVAILABLE, which
// callers and proxies retry, here or on another replica; not INTERNAL.
func TestADatabaseOutOfConnectionsIsUnavailable(t *testing.T) {
	t.Parallel()
	for _, storeErr := range []error{
		fmt.Errorf("claiming work: failed to connect: %w", &pgconn.PgError{Severity: "FATAL", Code: "53300", Message: "sorry, too many clients already"}),
		fmt.Errorf("getting work: failed to connect: %w", &pgconn.PgError{Severity: "FATAL", Code: "53300", Message: `too many connections for role "automator"`}),
	} {
		var log bytes.Buffer
		s := bareServer(slog.New(slog.NewTextHandler(&log, nil)))
		err := s.internal(t.Context(), "claiming work", storeErr)
		if status.Code(err) != codes.Unavailable {
			t.Errorf("store error %v: %v; want UNAVAILABLE", storeErr, err)
		}
		if !strings.Contains(log.String(), "too many") {
			t.Errorf("store error %v: the log does not say why: %q", storeErr, log.String())
		}
	}
}

// TestInstancesNotWrittenForAnUnreachableDatabaseAreLoggedOncePerOutage:
// the recorder of instances' polls fails every few seconds while the
// database is out of reach; that is the outage's one warning, not an error
// per batch. Another failure is still an error.
func TestInstancesNotWrittenForAnUnreachableDatabaseAreLoggedOncePerOutage(t *testing.T) {
	t.Parallel()
	var log bytes.Buffer
	s := bareServer(slog.New(slog.NewTextHandler(&log, nil)))
	for range 3 {
		s.flushFailed(fmt.Errorf("writing instances: %w", store.ErrUnavailable))
	}
	if n := strings.Count(log.String(), "level=WARN"); n != 1 || strings.Contains(log.String(), "level=ERROR") {
		t.Errorf("3 failed writes with the database out of reach: %d warnings; want 1 and no error:\n%s", n, log.String())
	}
	s.flushFailed(errors.New("disk I/O error"))
	if n := strings.Count(log.String(), "level=ERROR"); n != 1 {
		t.Errorf("a failed write of another kind: %d errors; want 1", n)
	}
}

// TestACallUnderWayWhenTheDatabaseWentEndsNoOutage: a store call that
// began before the first failure of an outage and succeeded (its answer
// came just before the database went) does not say the database answers
// again; one begun after the failure does, once.
func TestACallUnderWayWhenTheDatabaseWentEndsNoOutage(t *testing.T) {
	t.Parallel()
	var log bytes.Buffer
	s := bareServer(slog.New(slog.NewTextHandler(&log, nil)))
	before := s.databaseMark()
	s.databaseUnreachable("err", "connection refused")
	s.databaseAnswered(before)
	if strings.Contains(log.String(), "the database answers again") {
		t.Fatalf("a call begun before the outage ended it:\n%s", log.String())
	}
	after := s.databaseMark()
	s.databaseAnswered(after)
	s.databaseAnswered(after)
	if n := strings.Count(log.String(), "the database answers again"); n != 1 {
		t.Errorf("a call begun after the failure: %d lines saying the database answers again; want 1:\n%s", n, log.String())
	}
}

// bareServer is a Server with only what the calls these tests make need:
// its log, its bounded log lines and no metrics.
func bareServer(log *slog.Logger) *Server {
	return &Server{log: log, storeMetrics: noStoreMetrics{},
		timedOutLog: newTimedOutLog(log, realClock{}), diskFullLog: newDiskFullLog(log, realClock{}),
		lockedLog: newLockedLog(log, realClock{}), internalLog: newInternalLog(log, realClock{}), unfailedLog: newUnfailedLog(log, realClock{})}
}
