//go:build !windows

package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/crypto"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// timedAutomator accepts every Complete and notes how long after the
// result was handed to post the first Complete went out.
type timedAutomator struct {
	answer time.Duration // how long the automator takes to answer
	start  time.Time
	took   time.Duration
}

func (*timedAutomator) Poll(context.Context, *automatorv1.PollRequest, ...grpc.CallOption) (*automatorv1.PollResponse, error) {
	panic("not polled")
}

func (f *timedAutomator) Complete(context.Context, *automatorv1.CompleteRequest, ...grpc.CallOption) (*automatorv1.CompleteResponse, error) {
	if f.took == 0 {
		f.took = time.Since(f.start)
	}
	time.Sleep(f.answer)
	return &automatorv1.CompleteResponse{}, nil
}

// BenchmarkPostWithSpool: one finished unit after another is posted by an
// agent with a spool on disk (the temporary directory: point TMPDIR at the
// file system a proxy's state_dir lives on). to-complete-ns/op is the time
// from the result's hand-over to post until the first Complete is sent: the
// proxy's share of claim→result latency that the spool adds.
//
//	go test -run '^$' -bench PostWithSpool ./proxy/agent/
//
// Answering at once, the automator beats every write to its fsyncs; answering
// after 1 ms (a round trip and a durable commit), it does not, and ns/op then
// also shows whether the writes hold the unit up.
func BenchmarkPostWithSpool(b *testing.B) {
	for _, answer := range []time.Duration{0, time.Millisecond} {
		b.Run("answer="+answer.String(), func(b *testing.B) { benchmarkPost(b, answer) })
	}
}

func benchmarkPost(b *testing.B, answer time.Duration) {
	f := &timedAutomator{answer: answer}
	a := New(Options{
		Client: f, Keys: crypto.Keys{testKey}, InstanceID: "a",
		Logger:   slog.New(slog.DiscardHandler),
		SpoolDir: filepath.Join(b.TempDir(), "spool"),
	})
	deadline := time.Now().Add(time.Hour)
	var total time.Duration
	b.ResetTimer()
	for i := range b.N {
		c := &automatorv1.Claim{WorkId: "w" + strconv.Itoa(i), ClaimId: "c", Account: "acme"}
		req := &automatorv1.CompleteRequest{Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: make([]byte, 200)}
		f.start, f.took = time.Now(), 0
		a.post(context.Background(), c, deadline, req)
		total += f.took
	}
	a.wg.Wait() // the writes still running
	b.StopTimer()
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "to-complete-ns/op")
}

// BenchmarkHandleTinyScript is the proxy's whole per-unit path for the
// bench's tiny.sh (`#!/bin/sh` / `echo ok`), 64 at once, without the
// network: open the sealed command, run the script, seal the result, post
// it (to a fake that accepts at once; no spool, as in the bench).
// cpu-ns/op is this process's CPU per unit, the script's own excluded;
// compare with BenchmarkRun and BenchmarkRawExec in proxy/runner.
//
//	go test -run '^$' -bench HandleTinyScript -benchtime 2000x ./proxy/agent/
func BenchmarkHandleTinyScript(b *testing.B) {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tiny.sh"), []byte("#!/bin/sh\necho ok\n"), 0o755); err != nil {
		b.Fatal(err)
	}
	a := New(Options{
		Client: completeOnly{}, Keys: crypto.Keys{testKey}, InstanceID: "a", ScriptsDir: dir,
		Logger: slog.New(slog.DiscardHandler),
	})
	plain, _ := proto.Marshal(&automatorv1.Command{Script: "tiny.sh"})
	var next atomic.Int64
	b.SetParallelism(64)
	b.ReportAllocs()
	measureCPU(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := "w" + strconv.FormatInt(next.Add(1), 10)
			sealed, err := crypto.Seal(testKey, "acme", id, crypto.DirCommand, plain)
			if err != nil {
				b.Error(err)
				return
			}
			c := &automatorv1.Claim{WorkId: id, ClaimId: "c", Account: "acme", SealedCommand: sealed, Remaining: durationpb.New(time.Minute)}
			a.handle(context.Background(), context.Background(), c, time.Now())
		}
	})
}

// measureCPU reports the process's CPU per op from here to the end of b.
func measureCPU(b *testing.B) {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	b.Cleanup(func() {
		if b.N > 0 {
			b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-ns/op")
		}
	})
}
