package service

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/kardianos/service"
)

// LogWriter bridges slog to a service logger: each line written (a record
// of slog's TextHandler or JSONHandler) goes to l at the record's level,
// ERROR as an error, WARN as a warning, anything else as information. Of a
// text record the time= field is dropped, since the system log stamps its
// own, and so is level=; a JSON record is passed whole, still one JSON
// object for a log collector.
func LogWriter(l service.Logger) io.Writer {
	return &logWriter{l: l}
}

type logWriter struct {
	mu  sync.Mutex
	l   service.Logger
	buf []byte
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		line := string(w.buf[:i])
		w.buf = w.buf[i+1:]
		if strings.TrimSpace(line) == "" {
			continue
		}
		level, msg := splitLevel(line)
		msg = cutLine(msg)
		switch level {
		case "ERROR":
			_ = w.l.Error(msg)
		case "WARN":
			_ = w.l.Warning(msg)
		default:
			_ = w.l.Info(msg)
		}
	}
	return len(p), nil
}

// splitLevel takes the leading time= and level= fields off a TextHandler
// line and returns the level and the rest; a JSONHandler line it returns
// whole, with its level.
func splitLevel(line string) (level, rest string) {
	if strings.HasPrefix(line, "{") {
		var rec struct {
			Level string `json:"level"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil {
			return rec.Level, line
		}
	}
	rest = line
	if strings.HasPrefix(rest, "time=") {
		_, rest, _ = strings.Cut(rest, " ")
	}
	if v, ok := strings.CutPrefix(rest, "level="); ok {
		level, rest, _ = strings.Cut(v, " ")
	}
	return level, rest
}

// maxLogLine bounds one entry: the Windows Event Log refuses a string of
// more than 31,839 characters (ReportEvent), and the entry would be lost;
// syslog daemons cut far shorter lines themselves.
const maxLogLine = 30000

// cutLine cuts a line longer than maxLogLine on a character boundary,
// saying how much was cut.
func cutLine(line string) string {
	if len(line) <= maxLogLine {
		return line
	}
	n := maxLogLine
	for n > 0 && !utf8.RuneStart(line[n]) {
		n--
	}
	return fmt.Sprintf("%s … (%d bytes more cut: the system log takes no longer entry)", line[:n], len(line)-n)
}
