package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/waittest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// startStateAgent runs an agent that keeps a state file; stop cancels it
// and waits for Run to return.
func startStateAgent(t *testing.T, f *fakeAutomator, path string, every time.Duration) (stop func()) {
	t.Helper()
	a := New(Options{
		tune:       testTuning(t),
		ConfigFile: "/etc/proxy/proxy.yaml", ConfigSHA256: "c0ffee",
		Client: f, Keys: crypto.Keys{testKey}, InstanceID: "a", Version: "v-test", ScriptsDir: t.TempDir(),
		MaxConcurrency: 1, PollWait: time.Second, GracePeriod: 5 * time.Second,
		BackoffMin: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		Logger:    slog.New(slog.DiscardHandler),
		StateFile: path, StateEvery: every,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			waittest.Recv(t, done, "the agent's Run to return after its context was cancelled")
		}
	}
	t.Cleanup(stop)
	return stop
}

func readState(t *testing.T, path string) State {
	t.Helper()
	s, err := ReadState(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStateFileRecordsLastSuccessfulPoll: `proxy status` can tell when the
// instance last polled successfully, and that it stopped cleanly; and which
// config file the run read, with its digest, to tell when it changed since.
func TestStateFileRecordsLastSuccessfulPoll(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state", StateFileName)
	f := newFake()
	before := time.Now()
	stop := startStateAgent(t, f, path, time.Millisecond)
	f.responses <- &automatorv1.PollResponse{}
	waittest.Until(t, "a recorded poll", func() bool { s, err := ReadState(path); return err == nil && !s.LastPoll.IsZero() })
	s := readState(t, path)
	if s.InstanceID != "a" || s.Version != "v-test" || s.PID <= 0 || s.StartedAt.Before(before) || s.LastPoll.Before(s.StartedAt) ||
		s.ConfigFile != "/etc/proxy/proxy.yaml" || s.ConfigSHA256 != "c0ffee" {
		t.Fatalf("state %+v", s)
	}
	if !s.StoppedAt.IsZero() || !s.StoppingAt.IsZero() {
		t.Fatalf("a running agent's state says it stopped: %+v", s)
	}
	stop()
	s = readState(t, path)
	if s.StoppingAt.IsZero() || s.StoppedAt.Before(s.StoppingAt) || s.LastPoll.IsZero() {
		t.Fatalf("state after a clean stop: %+v", s)
	}
}

// TestStateFileSaysStoppingWhileUnitsFinish: between the stop request and
// the end of the grace period the state file says how many units run.
func TestStateFileSaysStoppingWhileUnitsFinish(t *testing.T) {
	t.Parallel()
	b := &blockingRunner{release: make(chan struct{}), ended: make(chan error, 4)}
	useRunner(t, b.run)
	path := filepath.Join(t.TempDir(), StateFileName)
	f := newFake()
	stop := startStateAgent(t, f, path, time.Millisecond)
	f.responses <- &automatorv1.PollResponse{Claims: []*automatorv1.Claim{claim(t, "w1", &automatorv1.Command{Script: "s"})}}
	waittest.Until(t, "running", func() bool { return b.count() == 1 })
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	waittest.Until(t, "the state file to say stopping", func() bool {
		s, err := ReadState(path)
		return err == nil && !s.StoppingAt.IsZero() && s.Running == 1 && s.StoppedAt.IsZero()
	})
	b.release <- struct{}{}
	waittest.Recv(t, stopped, "the stopping agent to return once its last unit finished")
	if s := readState(t, path); s.StoppedAt.IsZero() || s.Running != 0 {
		t.Fatalf("state after the unit finished: %+v", s)
	}
}

// TestStateFileIsWrittenAtMostOnceEveryInterval: polls returning quickly do
// not rewrite the file each time; the first poll is recorded at once.
func TestStateFileIsWrittenAtMostOnceEveryInterval(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), StateFileName)
	f := newFake()
	stop := startStateAgent(t, f, path, time.Hour)
	f.responses <- &automatorv1.PollResponse{}
	waittest.Until(t, "the first poll recorded", func() bool { s, err := ReadState(path); return err == nil && !s.LastPoll.IsZero() })
	first := readState(t, path).LastPoll
	for range 5 {
		f.responses <- &automatorv1.PollResponse{}
	}
	waittest.Until(t, "7 polls", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.polls) >= 7 })
	if got := readState(t, path).LastPoll; !got.Equal(first) {
		t.Fatalf("the state file was rewritten within the interval: last poll %v, first %v", got, first)
	}
	stop()
	if got := readState(t, path).LastPoll; !got.After(first) {
		t.Fatalf("the stop did not record the latest poll: %v, first %v", got, first)
	}
}

// TestStateFileKeepsTheLastPollOfAnEarlierRun: a restarted instance that
// cannot reach the automator still shows when it last could.
func TestStateFileKeepsTheLastPollOfAnEarlierRun(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), StateFileName)
	earlier := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := writeState(path, State{InstanceID: "a", PID: 1, LastPoll: earlier, StoppedAt: earlier}); err != nil {
		t.Fatal(err)
	}
	f := newFake()
	f.pollErr = status.Error(codes.Unavailable, "down")
	shortReportLost(t) // the stop's report cannot reach the automator either
	startStateAgent(t, f, path, time.Millisecond)
	waittest.Until(t, "a failed poll", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.polls) >= 2 })
	s := readState(t, path)
	if !s.LastPoll.Equal(earlier) || !s.StoppedAt.IsZero() || !s.StartedAt.After(earlier) {
		t.Fatalf("state of a new run that has not polled: %+v, want last poll %v kept", s, earlier)
	}
}

// TestAStateFilePastItsBoundIsNotReadWhole: `proxy status`, run as root,
// reads the state file of a --user service, whose directory that user (and
// its scripts) may write: a file of gigabytes would be read into memory.
// One past the bound (1 MiB, the proxy's own file is well under 1 KiB) is
// read up to it, and so refused as cut short.
func TestAStateFilePastItsBoundIsNotReadWhole(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), StateFileName)
	// Valid JSON, its closing brace past the bound.
	data := []byte(`{"pid": 42` + strings.Repeat(" ", maxStateFile) + `}`)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := ReadState(path); err == nil {
		t.Fatalf("a state file of %d bytes, past the bound of %d, was read whole (pid %d); want it refused", len(data), maxStateFile, s.PID)
	}
}
