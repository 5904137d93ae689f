//go:build !windows

package runner

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// The per-script cost of the runner next to the floor under it, the raw
// fork/exec that the bench's "tiny.sh, 64 callers" row compares against:
//
//	go test -run '^$' -bench . -benchtime 2000x ./proxy/runner/
//
// Both run `#!/bin/sh` / `echo ok`, 64 at once (SetParallelism scales
// GOMAXPROCS), with stdout and stderr through pipes. Besides the wall time
// each reports cpu-ns/op: the CPU this process (the proxy's side: fork,
// pipes, copies, waiting) spent per script, the scripts' own CPU excluded.
// On a shared machine that is the steadier figure.

const benchParallel = 64

// selfCPU is this process's user+system CPU time so far.
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measureCPU reports the process's CPU per op from here to the end of b.
func measureCPU(b *testing.B) {
	start := selfCPU(b)
	b.Cleanup(func() {
		if b.N > 0 {
			b.ReportMetric(float64(selfCPU(b)-start)/float64(b.N), "cpu-ns/op")
		}
	})
}

func benchScript(b *testing.B) (dir, path string) {
	b.Helper()
	dir = b.TempDir()
	path = filepath.Join(dir, "tiny.sh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho ok\n"), 0o755); err != nil {
		b.Fatal(err)
	}
	return dir, path
}

// BenchmarkRawExec is the baseline: exec.Command(tiny.sh).Run().
func BenchmarkRawExec(b *testing.B) {
	_, path := benchScript(b)
	b.SetParallelism(benchParallel)
	b.ReportAllocs()
	measureCPU(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			var out, errOut bytes.Buffer
			cmd := exec.Command(path)
			cmd.Stdout, cmd.Stderr = &out, &errOut
			if err := cmd.Run(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRun is the runner with what the agent passes: the four PROXY_*
// variables, a deadline and the default output limit.
func BenchmarkRun(b *testing.B) {
	dir, _ := benchScript(b)
	spec := Spec{
		ScriptsDir: dir,
		Script:     "tiny.sh",
		Env: map[string]string{
			"PROXY_WORK_ID": "w_0123456789abcdef", "PROXY_ACCOUNT": "bench",
			"PROXY_INSTANCE_ID": "bench-a", "PROXY_DEADLINE_SECONDS": "299",
		},
		Deadline: time.Now().Add(time.Hour),
	}
	b.SetParallelism(benchParallel)
	b.ReportAllocs()
	measureCPU(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := Run(context.Background(), spec)
			if err != nil || string(res.Stdout) != "ok\n" {
				b.Errorf("Run: %q, %v", res.Stdout, err)
				return
			}
		}
	})
}
