package cli

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
)

// startCheck checks a SQLite database once, as serve starts, beside
// serving (SQLite's quick_check, on a read connection: every page read,
// about a second for 500 MB here), so that a database damaged while the
// automator was stopped (a live file copied with cp and put back, a bad
// sector, a lost write) is said at once, with what to do (repair), rather
// than when a call first meets the damage. The returned channel is
// closed when the check is over, or given up with ctx.
func startCheck(ctx context.Context, st store.Store, repair string, log *slog.Logger) <-chan struct{} {
	done := make(chan struct{})
	s, ok := store.Uncached(st).(*sqlitestore.Store)
	if !ok {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		start := time.Now()
		problems, found, err := s.QuickCheck(ctx)
		switch {
		case ctx.Err() != nil:
		case err != nil:
			log.Warn("checking the database (SQLite's quick_check) failed", "err", err)
		case found > 0:
			log.Error("the database is damaged: SQLite's quick_check found problems; the calls that read or write the damaged pages fail until it is repaired",
				"problems", found, "first", strings.Join(problems[:min(len(problems), 3)], "; "), "repair", repair)
		default:
			log.Info("database checked: SQLite's quick_check found nothing wrong", "took", time.Since(start).Round(time.Millisecond))
		}
	}()
	return done
}
