package server_test

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/grpcwire"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// authFailures counts the failed authentications a Metrics is told of.
type authFailures struct {
	undeliveredCount
	refused, limited atomic.Int32
}

func (a *authFailures) AuthFailed(limited bool) {
	if limited {
		a.limited.Add(1)
	} else {
		a.refused.Add(1)
	}
}

// connFrom dials the automator over TLS from source address ip (any
// 127.0.0.0/8 address is this host's on Linux), presenting secret.
func (e *env) connFrom(ip, secret string) *grpc.ClientConn {
	e.t.Helper()
	tlsCfg, err := pki.ClientTLS(e.caPEM, "127.0.0.1")
	if err != nil {
		e.t.Fatal(err)
	}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
		return d.DialContext(ctx, "tcp", addr)
	}
	c, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
		grpc.WithPerRPCCredentials(grpcwire.Bearer(secret, true)), grpc.WithContextDialer(dial))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

// TestWrongTokenFloodFromManySourcesLogsBoundedLines: an unauthenticated
// client with many source addresses (a botnet, an IPv6 prefix) stays
// within each address's failure budget, so every attempt is refused as
// Unauthenticated and audited; but the automator's log does not grow a
// line per attempt. At most 20 failed authentications a minute get a line
// of their own, whatever their sources; the rest are counted, and one line
// says how many once the minute is over. The metric counts every one.
func TestWrongTokenFloodFromManySourcesLogsBoundedLines(t *testing.T) {
	t.Parallel()
	const sources, each, ownLines = 12, 25, 20
	if l, err := net.Listen("tcp", "127.0.0.10:0"); err != nil {
		t.Skipf("this host has no loopback address but 127.0.0.1 (%v): the test needs several sources", err)
	} else {
		l.Close()
	}
	log := &syncLog{}
	clock := newFakeClock()
	counted := &authFailures{}
	e := newEnv(t, envOptions{clock: clock, log: log, metrics: counted})
	for i := range sources {
		ip := fmt.Sprintf("127.0.0.%d", 10+i)
		bad := automatorv1.NewProxyServiceClient(e.connFrom(ip, "opt_wrong"))
		for n := range each {
			if _, err := pollNow(bad, "x", 1); status.Code(err) != codes.Unauthenticated {
				t.Fatalf("failed attempt %d from %s, within its budget: %v; want Unauthenticated", n+1, ip, err)
			}
		}
	}
	total := sources * each
	if got := len(log.lines("authentication failed")); got != ownLines {
		t.Errorf("%d failed authentications from %d sources wrote %d log lines of their own; want %d", total, sources, got, ownLines)
	}
	if got := counted.refused.Load(); got != int32(total) {
		t.Errorf("metric counted %d refused authentications, want %d", got, total)
	}
	// The audit log still records each (within its source's budget).
	if got := countKind(e.auditLog(), store.AuditAuthFailed); got != total {
		t.Errorf("%d auth.failed audit events, want %d", got, total)
	}

	// The minute over, the next failure's line comes after one that
	// counts those not logged.
	clock.Advance(time.Minute)
	bad := automatorv1.NewProxyServiceClient(e.connFrom("127.0.0.9", "opt_wrong"))
	if _, err := pollNow(bad, "x", 1); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a failed attempt a minute later: %v; want Unauthenticated", err)
	}
	summary := log.lines("failed authentications not logged one by one")
	if len(summary) != 1 {
		t.Fatalf("summary lines: %q; want one", summary)
	}
	m := regexp.MustCompile(`count=(\d+)`).FindStringSubmatch(summary[0])
	if m == nil {
		t.Fatalf("summary line %q has no count", summary[0])
	}
	if n, _ := strconv.Atoi(m[1]); n != total-ownLines {
		t.Errorf("summary counts %d failures not logged, want %d: %q", n, total-ownLines, summary[0])
	}
	if got := len(log.lines("authentication failed")); got != ownLines+1 {
		t.Errorf("%d lines of their own after the minute, want %d", got, ownLines+1)
	}
}

// TestFailuresNotLoggedAreCountedOnceTheMinuteIsOverWithoutAnother: the
// line counting the failed authentications not logged one by one is
// written once their minute is over even when no failure comes after it
// (the flood stopped): the sweeper writes it, so the log's last word on a
// flood is not the twentieth line.
func TestFailuresNotLoggedAreCountedOnceTheMinuteIsOverWithoutAnother(t *testing.T) {
	t.Parallel()
	const total, ownLines = 25, 20
	log := &syncLog{}
	clock := newFakeClock()
	e := newEnv(t, envOptions{clock: clock, log: log, sweepInterval: 20 * time.Millisecond})
	bad := automatorv1.NewProxyServiceClient(e.connFrom("127.0.0.1", "opt_wrong"))
	for n := range total {
		if _, err := pollNow(bad, "x", 1); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("failed attempt %d, within the budget: %v; want Unauthenticated", n+1, err)
		}
	}
	if got := log.lines("failed authentications not logged one by one"); len(got) != 0 {
		t.Fatalf("summary within the minute: %q; want none yet", got)
	}
	clock.Advance(time.Minute)
	summary := log.awaitLines(t, "the sweeper to count the failures not logged once the minute is over", "failed authentications not logged one by one")
	if len(summary) != 1 || !strings.Contains(summary[0], "count="+strconv.Itoa(total-ownLines)) {
		t.Fatalf("summary lines once the minute is over, with no failure after it: %q; want one counting %d", summary, total-ownLines)
	}
}
