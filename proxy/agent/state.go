package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// StateFileName is the agent's state file in the proxy's state_dir.
const StateFileName = "status.json"

// DefaultStateEvery is how often, at most, a successful poll is recorded.
const DefaultStateEvery = 5 * time.Second

// maxStateFile bounds what ReadState reads: the proxy's status file is a
// few hundred bytes.
const maxStateFile = 1 << 20

// State is what the agent records in its state file, so that `proxy
// status` can tell when this instance last polled the automator
// successfully, also while it is stopped.
type State struct {
	InstanceID string `json:"instance_id"`
	PID        int    `json:"pid"`
	Version    string `json:"version"`
	// StartedAt is when this run of the agent began.
	StartedAt time.Time `json:"started_at"`
	// LastPoll is when a poll last succeeded, in this run or an earlier one
	// (at most StateEvery old while polling).
	LastPoll time.Time `json:"last_poll,omitzero"`
	// StoppingAt is when the agent stopped polling and began to wait for
	// its running units (Running of them).
	StoppingAt time.Time `json:"stopping_at,omitzero"`
	Running    int       `json:"running,omitempty"`
	// StoppedAt is when the agent stopped cleanly.
	StoppedAt time.Time `json:"stopped_at,omitzero"`
	// ConfigFile is the config file this run was started with, and
	// ConfigSHA256 the digest of its bytes as this run read them
	// (config.Digest), so that `proxy status` can tell the file changed
	// since. A state file written before they were recorded has neither.
	ConfigFile   string `json:"config_file,omitempty"`
	ConfigSHA256 string `json:"config_sha256,omitempty"`
}

// ReadState reads a state file.
func ReadState(path string) (State, error) {
	f, err := openStateFile(path, os.O_RDONLY, 0)
	if err != nil {
		return State{}, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxStateFile))
	f.Close()
	if err != nil {
		return State{}, err
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return State{}, fmt.Errorf("reading proxy state %s: %w", path, err)
	}
	return s, nil
}

// stateFile keeps the state file of one Agent.Run. Its methods are called
// from Run's goroutine only; a nil *stateFile (no StateFile set) does
// nothing.
type stateFile struct {
	path    string
	every   time.Duration
	log     *slog.Logger
	st      State
	polled  time.Time // when a poll was last written
	failing bool
}

func newStateFile(o Options, log *slog.Logger) *stateFile {
	if o.StateFile == "" {
		return nil
	}
	every := o.StateEvery
	if every <= 0 {
		every = DefaultStateEvery
	}
	return &stateFile{path: o.StateFile, every: every, log: log}
}

// started records a new run, keeping the last successful poll of an
// earlier one.
func (f *stateFile) started(o Options, now time.Time) {
	if f == nil {
		return
	}
	prev, _ := ReadState(f.path)
	f.st = State{InstanceID: o.InstanceID, PID: os.Getpid(), Version: o.Version, StartedAt: now, LastPoll: prev.LastPoll,
		ConfigFile: o.ConfigFile, ConfigSHA256: o.ConfigSHA256}
	f.write()
}

// recordPoll records a successful poll: the first of the run at once,
// then at most once every f.every.
func (f *stateFile) recordPoll(now time.Time) {
	if f == nil {
		return
	}
	f.st.LastPoll = now
	if now.Sub(f.polled) >= f.every {
		f.polled = now
		f.write()
	}
}

func (f *stateFile) stopping(now time.Time, running int) {
	if f == nil {
		return
	}
	f.st.StoppingAt, f.st.Running = now, running
	f.write()
}

func (f *stateFile) stopped(now time.Time) {
	if f == nil {
		return
	}
	f.st.StoppedAt, f.st.Running = now, 0
	f.write()
}

// write replaces the file atomically (temporary file, rename), readable by
// everyone: it holds no secret, and an operator without root may ask. The
// file is the state_dir's owner's (see ownLike).
func (f *stateFile) write() {
	err := writeState(f.path, f.st)
	switch {
	case err != nil && !f.failing:
		f.log.Warn("cannot write the state file; `proxy status` will not show this instance's last poll", "path", f.path, "err", err)
	case err == nil && f.failing:
		f.log.Info("state file written again", "path", f.path)
	}
	f.failing = err != nil
}

func writeState(path string, s State) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(append(data, '\n'))
	cherr := tmp.Chmod(0o644)
	cerr := tmp.Close()
	oerr := ownLike(tmp.Name(), filepath.Dir(path))
	if err := errors.Join(werr, cherr, cerr, oerr); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}
