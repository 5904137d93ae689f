package cli

import (
	"io"
	"log/slog"

	"github.com/opsgate/opsgate/proxy/service"
)

// newLogger logs to w as text, or as one JSON object per line when format
// is "json". The agent logs its connection to the automator once per
// change of state (connected, unreachable, refused), not once per retry.
func newLogger(w io.Writer, format string) *slog.Logger {
	return service.NewLogger(w, format)
}
