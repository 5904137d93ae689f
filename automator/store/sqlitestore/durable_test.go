package sqlitestore

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// childEnv switches the test binary into runEnqueueChild, with the database
// path as its value.
const childEnv = "SQLITESTORE_TEST_ENQUEUE_CHILD_DB"

// TestDurableAcrossKill proves "acknowledged means durable": a child process
// enqueues units one by one and reports each id only after WorkEnqueue
// returned; the parent kills it with SIGKILL mid-stream and then finds every
// reported unit in the store. (A process kill, not a power cut: it shows that
// nothing acknowledged lives only in the process's memory, and that the
// database opens cleanly after the crash.)
func TestDurableAcrossKill(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("SIGKILL semantics are POSIX-only")
	}
	const readBeforeKill = 25
	path := filepath.Join(t.TempDir(), "automator.db")
	createWithAcme(t, path)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("StdoutPipe: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the child: %v", err)
	}
	killed := false
	kill := func() {
		if !killed {
			killed = true
			_ = cmd.Process.Kill()
		}
	}
	t.Cleanup(kill) // on a failed read below

	var acked []string
	r := bufio.NewReader(stdout)
	for len(acked) < readBeforeKill {
		line, err := r.ReadString('\n')
		if err != nil {
			kill()
			cmd.Wait()
			t.Fatalf("the child stopped after acknowledging %d units: %v; its stderr:\n%s", len(acked), err, stderr.String())
		}
		acked = append(acked, strings.TrimSuffix(line, "\n"))
	}
	kill()
	// Whatever the child printed before it died was acknowledged too. A
	// final line without its newline was cut by the kill, and not counted.
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			break
		}
		acked = append(acked, strings.TrimSuffix(line, "\n"))
	}
	if err := cmd.Wait(); err == nil {
		t.Fatalf("the child exited cleanly before it was killed; its stderr:\n%s", stderr.String())
	}

	s := open(t, path)
	var ok string
	if err := s.read.QueryRowContext(t.Context(), `PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
		t.Errorf("integrity_check after the kill = %q, %v", ok, err)
	}
	for _, id := range acked {
		w, err := s.WorkGet(t.Context(), id)
		if err != nil {
			t.Errorf("unit %s was acknowledged before the kill but is lost: %v", id, err)
			continue
		}
		if w.State != store.StateQueued {
			t.Errorf("unit %s: state %s after the kill, want queued", id, w.State)
		}
	}
	t.Logf("%d acknowledged units all survived SIGKILL", len(acked))
}

// createWithAcme makes the database at path with the account "acme" in it,
// and closes it.
func createWithAcme(t *testing.T, path string) {
	t.Helper()
	s, err := Open(t.Context(), path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if _, err := s.AccountCreate(t.Context(), store.AccountCreateParams{Name: "acme", TokenHash: []byte("h"), KeyID: 1, SealedKey: []byte("k"), Now: testNow}); err != nil {
		t.Fatalf("AccountCreate: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// runEnqueueChild is the child side of TestDurableAcrossKill: enqueue and
// report, until killed. It stops by itself after a minute, or when the parent
// is gone (the write to stdout fails).
func runEnqueueChild(path string) int {
	ctx := context.Background()
	s, err := Open(ctx, path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer s.Close()
	stop := time.Now().Add(time.Minute)
	for i := 0; time.Now().Before(stop); i++ {
		id := fmt.Sprintf("durable-%06d", i)
		if _, err := s.WorkEnqueue(ctx, store.WorkEnqueueParams{
			ID:            id,
			Account:       "acme",
			SealedCommand: []byte("command " + id),
			Now:           testNow,
			Deadline:      testNow.Add(time.Hour),
		}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if _, err := fmt.Fprintln(os.Stdout, id); err != nil {
			return 1
		}
	}
	return 0
}
