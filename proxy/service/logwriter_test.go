package service

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// recordingLogger is a service.Logger that keeps what it is given.
type recordingLogger struct {
	mu    sync.Mutex
	lines []string
}

func (r *recordingLogger) add(level string, v ...any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, level+" "+fmt.Sprint(v...))
	return nil
}

func (r *recordingLogger) Error(v ...any) error   { return r.add("E", v...) }
func (r *recordingLogger) Warning(v ...any) error { return r.add("W", v...) }
func (r *recordingLogger) Info(v ...any) error    { return r.add("I", v...) }
func (r *recordingLogger) Errorf(f string, a ...any) error {
	return r.add("E", fmt.Sprintf(f, a...))
}
func (r *recordingLogger) Warningf(f string, a ...any) error {
	return r.add("W", fmt.Sprintf(f, a...))
}
func (r *recordingLogger) Infof(f string, a ...any) error { return r.add("I", fmt.Sprintf(f, a...)) }

// TestLogWriterBridgesSlogLevelsToTheServiceLogger: errors reach the system
// log as errors, warnings as warnings, the rest as information, one entry
// per record, without slog's own time stamp.
func TestLogWriterBridgesSlogLevelsToTheServiceLogger(t *testing.T) {
	rec := &recordingLogger{}
	log := slog.New(slog.NewTextHandler(LogWriter(rec), &slog.HandlerOptions{Level: slog.LevelDebug}))
	log.Info("connected to the automator; polling", "instance_id", "a")
	log.Warn("automator unreachable", "code", "Unavailable")
	log.Error("the automator refused this proxy's token")
	log.Debug("result posted")
	want := []string{
		`I msg="connected to the automator; polling" instance_id=a`,
		`W msg="automator unreachable" code=Unavailable`,
		`E msg="the automator refused this proxy's token"`,
		`I msg="result posted"`,
	}
	if strings.Join(rec.lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("service log:\n%s\nwant:\n%s", strings.Join(rec.lines, "\n"), strings.Join(want, "\n"))
	}
}

func TestLogWriterJoinsPartialWrites(t *testing.T) {
	rec := &recordingLogger{}
	w := LogWriter(rec)
	fmt.Fprint(w, "level=WARN msg=\"half")
	fmt.Fprint(w, " and half\"\nlevel=INFO msg=next\n\n")
	if got := strings.Join(rec.lines, "|"); got != `W msg="half and half"|I msg=next` {
		t.Fatalf("lines %q", got)
	}
}

// TestLogWriterKeepsJSONRecordsWholeAtTheirLevel: with log_format json, a
// record reaches the system log as the JSON object it is, at its level, not
// as information.
func TestLogWriterKeepsJSONRecordsWholeAtTheirLevel(t *testing.T) {
	rec := &recordingLogger{}
	log := slog.New(slog.NewJSONHandler(LogWriter(rec), nil))
	log.Warn("automator unreachable", "code", "Unavailable")
	log.Error("serve ended", "err", "listening: address in use")
	log.Info("serving")
	want := []string{"W ", "E ", "I "}
	if len(rec.lines) != len(want) {
		t.Fatalf("service log %q; want %d entries", rec.lines, len(want))
	}
	for i, l := range rec.lines {
		if !strings.HasPrefix(l, want[i]) || !json.Valid([]byte(l[2:])) {
			t.Errorf("entry %d: %q; want level %q and a JSON object", i, l, want[i])
		}
	}
}

// TestLogWriterCutsAnEntryTheSystemLogWouldRefuse: the Windows Event Log
// refuses a string over 31,839 characters, and the entry was lost (a
// warning listing many writable script paths could be that long): a longer
// line is cut on a character boundary, saying how much went.
func TestLogWriterCutsAnEntryTheSystemLogWouldRefuse(t *testing.T) {
	rec := &recordingLogger{}
	w := LogWriter(rec)
	long := strings.Repeat("é", 20000) // 40,000 bytes
	fmt.Fprintf(w, "level=WARN msg=%s\n", long)
	if len(rec.lines) != 1 {
		t.Fatalf("%d entries, want 1", len(rec.lines))
	}
	got := rec.lines[0]
	if len(got) > maxLogLine+100 || !strings.Contains(got, "bytes more cut") || !utf8.ValidString(got) {
		t.Errorf("entry of %d bytes (valid UTF-8: %v) ending %q; want it cut near %d bytes on a character boundary, saying so", len(got), utf8.ValidString(got), got[len(got)-80:], maxLogLine)
	}
	fmt.Fprint(w, "level=INFO msg=short\n")
	if rec.lines[1] != "I msg=short" {
		t.Errorf("a short line became %q", rec.lines[1])
	}
}

// TestAJSONLogGivesDurationsAsText: a duration in a JSON log line reads as
// in a text one ("1.5s"), not as a count of nanoseconds an operator has
// to divide.
func TestAJSONLogGivesDurationsAsText(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	NewLogger(&b, "json").Info("waited", "for", 1500*time.Millisecond, "n", 3)
	var got map[string]any
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatalf("%q: %v", b.String(), err)
	}
	if got["for"] != "1.5s" || got["n"] != float64(3) {
		t.Errorf("JSON line %q: want for \"1.5s\" and n 3", b.String())
	}
}
