package client_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/client"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// skewedClock is an automator's clock set apart from its callers'.
type skewedClock time.Duration

func (c skewedClock) Now() time.Time { return time.Now().Add(time.Duration(c)) }

// TestWaitsKeepToTheAutomatorsDeadlineWhateverTheCallersClock: deadlines
// are the automator's (guarantee 6), so a caller whose clock is an hour
// off must still wait for a unit as long as the unit has left, no less
// (an hour ahead, it would take the deadline for past and ask again every
// second) and no more (an hour behind, a hung automator would be given up
// an hour late). Each wait's try, from ExecuteOnProxy and from Wait by id,
// is bounded by the time the unit has left on the automator's clock.
func TestWaitsKeepToTheAutomatorsDeadlineWhateverTheCallersClock(t *testing.T) {
	t.Parallel()
	const timeout = 5 * time.Minute
	for _, skew := range []time.Duration{-time.Hour, time.Hour} {
		t.Run("automator "+skew.String(), func(t *testing.T) {
			t.Parallel()
			waits := make(chan time.Duration, 16)
			a := automatortest.Start(t, automatortest.Options{
				Clock: skewedClock(skew),
				Interceptors: []grpc.UnaryServerInterceptor{
					func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
						if info.FullMethod == automatorv1.AutomatorService_Wait_FullMethodName {
							left := time.Duration(-1)
							if d, ok := ctx.Deadline(); ok {
								left = time.Until(d)
							}
							select {
							case waits <- left:
							default:
							}
						}
						return h(ctx, req)
					},
				},
			})
			c := newClient(t, a)
			p := newFakeProxy(t, a)
			// The wait's try's answer must begin up to a second past the
			// deadline, and then has client.AnswerWithin to arrive
			// whole: the deadline the automator sees is their sum. The
			// slack covers the calls' own time.
			check := func(who string) {
				t.Helper()
				left := waittest.Recv(t, waits, who+"'s wait to reach the automator") - client.AnswerWithin
				if left < timeout-time.Minute || left > timeout+5*time.Second {
					t.Fatalf("%s's wait's answer bounded to begin within %v from now; the unit has about %v left on the automator's clock", who, left, timeout)
				}
			}

			done := make(chan error, 1)
			go func() {
				_, err := c.ExecuteOnProxy(context.Background(), a.Account, client.Command{Script: "ok.sh"}, client.WithTimeout(timeout))
				done <- err
			}()
			check("ExecuteOnProxy")
			claim := p.claim()

			waited := make(chan error, 1)
			go func() {
				_, err := c.Wait(context.Background(), claim.GetWorkId())
				waited <- err
			}()
			check("Wait")

			p.complete(claim, "ok\n")
			if err := waittest.Recv(t, done, "ExecuteOnProxy to return"); err != nil {
				t.Fatalf("ExecuteOnProxy: %v", err)
			}
			if err := waittest.Recv(t, waited, "Wait to return"); err != nil {
				t.Fatalf("Wait: %v", err)
			}
		})
	}
}
