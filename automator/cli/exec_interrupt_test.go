//go:build linux

package cli_test

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/cli"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestExecInterruptedWhileItsSubmitIsAnsweredCancelsTheUnit: Ctrl-C after
// the automator stored exec's unit but before its answer reached exec (a
// slow automator; here the answer is held until exec is interrupted, so
// the interrupt always comes first) must still cancel the unit (README:
// "Ctrl-C cancels the unit"; docs/api.md: exec then exits 126), not leave
// it queued for a proxy to run unseen: exec's idempotency key is the
// client's, made per call, so the user could not find it.
func TestExecInterruptedWhileItsSubmitIsAnsweredCancelsTheUnit(t *testing.T) {
	t.Parallel()
	stored := make(chan struct{}, 1)
	interrupted := make(chan struct{})
	slowSubmit := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		if info.FullMethod == automatorv1.AutomatorService_Submit_FullMethodName && err == nil {
			stored <- struct{}{}
			select { // the answer is late: the caller is interrupted first
			case <-interrupted:
			case <-ctx.Done():
			}
		}
		return resp, err
	}
	a := automatortest.Start(t, automatortest.Options{Interceptors: []grpc.UnaryServerInterceptor{slowSubmit}})
	ctx, interrupt := context.WithCancel(context.Background())
	done := make(chan execResult, 1)
	go func() { done <- execCLI(ctx, a, "", "--account", "acme", "--timeout", "60s", "x.sh") }()
	waittest.Recv(t, stored, "the unit to be stored")
	interrupt()
	close(interrupted)
	r := waittest.Recv(t, done, "exec to return once interrupted")
	list, err := a.Store.WorkList(context.Background(), store.WorkListParams{Limit: 10})
	if err != nil || len(list) != 1 {
		t.Fatalf("units: %d, %v; want the one exec queued", len(list), err)
	}
	if list[0].State != store.StateCancelled || r.code != cli.ExitCancelled {
		t.Fatalf("exec interrupted after its unit was stored: exit %d, stderr %q; unit %s left %s; want exit 126 and the unit cancelled",
			r.code, r.stderr, list[0].ID, list[0].State)
	}
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestExecInterruptedSaysWhatItWaitsForWhileItsSubmitAndThenItsCancelAreSlow:
// exec interrupted while its submit's answer is on its way says, a second
// on, that it waits for that answer to cancel the unit it may have queued;
// the unit queued, a cancel that takes a second more says that it cancels
// that unit, and what a second interrupt does. Each is said once. Before,
// the notice looked once, a second after the interrupt, and said nothing
// when the unit was queued later (a review).
func TestExecInterruptedSaysWhatItWaitsForWhileItsSubmitAndThenItsCancelAreSlow(t *testing.T) {
	t.Parallel()
	submitted, releaseSubmit := make(chan struct{}, 1), make(chan struct{})
	cancelling, releaseCancel := make(chan struct{}, 1), make(chan struct{})
	slow := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		switch info.FullMethod {
		case automatorv1.AutomatorService_Submit_FullMethodName:
			resp, err := h(ctx, req)
			submitted <- struct{}{}
			<-releaseSubmit
			return resp, err
		case automatorv1.AutomatorService_Cancel_FullMethodName:
			cancelling <- struct{}{}
			<-releaseCancel
		}
		return h(ctx, req)
	}
	a := automatortest.Start(t, automatortest.Options{Interceptors: []grpc.UnaryServerInterceptor{slow}})
	ctx, interrupt := context.WithCancel(context.Background())
	var stderr lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(ctx, []string{"exec", "--server", a.URL(), "--api-key-file", a.APIKeyFile, "--ca", a.CAFile, "--account", "acme", "--timeout", "60s", "x.sh"},
			cli.Env{Stdin: strings.NewReader(""), Stdout: &bytes.Buffer{}, Stderr: &stderr})
	}()
	waittest.Recv(t, submitted, "the unit to be stored")
	interrupt()
	waittest.Until(t, "exec to say it waits for the submit's answer", func() bool {
		return strings.Contains(stderr.String(), "automator: interrupted: waiting for the automator's answer to the submit (10s at most), to cancel the unit it may have queued; interrupt again to stop waiting\n")
	})
	close(releaseSubmit)
	waittest.Recv(t, cancelling, "exec to cancel its unit")
	waittest.Until(t, "exec to say it cancels its unit", func() bool {
		return strings.Contains(stderr.String(), "automator: interrupted: cancelling work w_")
	})
	close(releaseCancel)
	if code := waittest.Recv(t, done, "exec to end"); code != cli.ExitCancelled {
		t.Errorf("exec: exit %d, stderr %q; want %d", code, stderr.String(), cli.ExitCancelled)
	}
	lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[1], "which is taking a while; interrupt again to stop waiting and leave it to run until its deadline at "+lines[1][len(lines[1])-8:]) ||
		!strings.HasSuffix(lines[2], "cancelled (interrupted)") {
		t.Errorf("exec said %q; want the submit's notice, the cancel's, each once, then the unit cancelled", lines)
	}
}
