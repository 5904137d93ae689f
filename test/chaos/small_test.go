//go:build linux

package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/internal/proctest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// small is the setting of the network and restart tests: one automator
// serving TLS (as in production), one account, the echo script and an
// execution log, and a caller.
type small struct {
	auto    *automator
	dir     string
	profile string
	scripts string
	execLog string
	client  automatorv1.AutomatorServiceClient
}

// newSmall serves a TLS automator whose public URL (and certificate) names
// host.
func newSmall(t *testing.T, host string) *small {
	t.Helper()
	dir := t.TempDir()
	s := &small{dir: dir, auto: newAutomator(t, dir, host, false)}
	if err := s.auto.Serve(); err != nil {
		t.Fatal(err)
	}
	s.profile = s.auto.CreateAccount("acme")
	s.scripts = writeScripts(t, dir)
	s.execLog = filepath.Join(dir, "exec.log")
	s.client = automatorv1.NewAutomatorServiceClient(s.auto.Dial())
	return s
}

// publicURL is the automator_url of the account's profile.
func (s *small) publicURL() string { return fmt.Sprintf("https://%s:%d", s.auto.Host, s.auto.Port) }

// submit queues an echo of tok (stdin "in") with a timeout and returns the
// work id and the output the script gives.
func (s *small) submit(t *testing.T, tok string, timeout time.Duration) (id, want string) {
	t.Helper()
	return s.submitCommand(t, &automatorv1.Command{
		Script: "echo.sh", Args: []string{tok, "0", "0"}, Stdin: []byte("in"), Env: map[string]string{"CHAOS_LOG": s.execLog},
	}, timeout), tok + ":in\n"
}

func (s *small) submitCommand(t *testing.T, cmd *automatorv1.Command, timeout time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := s.client.Submit(ctx, &automatorv1.ExecuteRequest{Account: "acme", Command: cmd, Timeout: durationpb.New(timeout)}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	return st.GetWorkId()
}

// wait waits by id until the unit ends (again after automator restarts).
func (s *small) wait(t *testing.T, id string, within time.Duration) *automatorv1.WorkStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		st, err := s.client.Wait(ctx, &automatorv1.WaitRequest{WorkId: id}, grpc.WaitForReady(true))
		if err == nil {
			return st
		}
		if !retryable(err) || ctx.Err() != nil {
			t.Fatalf("Wait %s: %v", id, err)
		}
		pause(ctx, 50*time.Millisecond)
	}
}

// get reads a unit's status now.
func (s *small) get(t *testing.T, id string) *automatorv1.WorkStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := s.client.Get(ctx, &automatorv1.GetRequest{WorkId: id}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("Get %s: %v", id, err)
	}
	return st
}

// mustSucceed waits for each unit and checks it succeeded with its output,
// and that its script ran exactly once.
func (s *small) mustSucceed(t *testing.T, ids, wants []string, within time.Duration) {
	t.Helper()
	for i, id := range ids {
		st := s.wait(t, id, within)
		if st.GetState() != automatorv1.State_STATE_SUCCEEDED || string(st.GetResult().GetStdout()) != wants[i] {
			t.Errorf("unit %s: %v (%s), stdout %q; want SUCCEEDED with %q", id, st.GetState(), st.GetReason(), st.GetResult().GetStdout(), wants[i])
		}
	}
	runs := map[string]int{}
	for _, e := range readExecs(t, s.execLog) {
		runs[e.WorkID]++
	}
	for _, id := range ids {
		if runs[id] != 1 {
			t.Errorf("unit %s ran %d times, want once", id, runs[id])
		}
	}
}

// mustAwait fails the test unless c is closed within timeout (or the
// process ends first).
func mustAwait(t *testing.T, p *proc, c <-chan struct{}, timeout time.Duration, what string) {
	t.Helper()
	if err := await(p, c, timeout); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// cpuTime is the CPU time a process has used (user and system).
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// "pid (comm) state ppid ...": utime and stime are the 14th and 15th
	// fields, the 12th and 13th after the command's closing parenthesis.
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("reading /proc/%d/stat: %q", pid, s)
	}
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticks
}

// gate makes a script that logs its start, says so through a FIFO, then
// waits for a line on another FIFO and prints it: the test holds a unit
// running, and knows it, without sleeping.
type gate struct {
	started, release string
}

const gateScript = `#!/bin/bash
s=$EPOCHREALTIME
printf 'S %s %s %s\n' "$PROXY_WORK_ID" "$PROXY_INSTANCE_ID" "$s" >> "$CHAOS_LOG"
echo "$PROXY_WORK_ID" > "$1"
IFS= read -r line < "$2"
printf 'gate:%s\n' "$line"
printf 'E %s %s %s %s\n' "$PROXY_WORK_ID" "$PROXY_INSTANCE_ID" "$s" "$EPOCHREALTIME" >> "$CHAOS_LOG"
`

func newGate(t *testing.T, s *small) *gate {
	t.Helper()
	proctest.WriteExecutable(t, filepath.Join(s.scripts, "gate.sh"), []byte(gateScript))
	g := &gate{started: filepath.Join(s.dir, "started.fifo"), release: filepath.Join(s.dir, "release.fifo")}
	for _, p := range []string{g.started, g.release} {
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Whatever happens, nobody stays blocked on a FIFO: opening it for
	// reading and writing never blocks and satisfies a blocked opener.
	t.Cleanup(func() {
		for _, p := range []string{g.started, g.release} {
			if f, err := os.OpenFile(p, os.O_RDWR, 0); err == nil {
				_, _ = f.WriteString("\n")
				f.Close()
			}
		}
	})
	return g
}

func (g *gate) command(s *small) *automatorv1.Command {
	return &automatorv1.Command{Script: "gate.sh", Args: []string{g.started, g.release}, Env: map[string]string{"CHAOS_LOG": s.execLog}}
}

// awaitStart returns the work id of the gate script that started.
func (g *gate) awaitStart(t *testing.T, timeout time.Duration) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		data, _ := os.ReadFile(g.started) // blocks until the script writes
		got <- strings.TrimSpace(string(data))
	}()
	select {
	case id := <-got:
		return id
	case <-time.After(timeout):
		t.Fatalf("the gate script did not start within %v", timeout)
		return ""
	}
}

// open lets the waiting gate script finish, printing line.
func (g *gate) open(t *testing.T, line string) {
	t.Helper()
	f, err := os.OpenFile(g.release, os.O_WRONLY, 0) // blocks until the script reads
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line + "\n"); err != nil {
		t.Fatal(err)
	}
}

// awaitNoOpenPolls waits until the automator holds no poll of account open
// (proctest.AwaitNoOpenPolls).
func (s *small) awaitNoOpenPolls(t *testing.T, account string, within time.Duration) {
	t.Helper()
	proctest.AwaitNoOpenPolls(t, s.auto.DataDir, account, within)
}
