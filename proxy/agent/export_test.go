package agent

import (
	"os"
	"time"
)

// PostsWaiting is how many results wait for the post on its way.
func (a *Agent) PostsWaiting() int { return a.poster.group.Waiting() }

// WithStopBounds is o with the bounds of a stopping agent's first poll
// set: heard when the automator answered the poll before the stop
// (stopHeardWithin), unheard when it did not (stopSaidWithin, and
// reportLostWithin when the poll also reports lost ones).
func WithStopBounds(o Options, heard, unheard time.Duration) Options {
	o.tune.stopHeardWithin = heard
	o.tune.stopSaidWithin, o.tune.reportLostWithin = unheard, unheard
	return o
}

// load is loadAll without the records it could not read.
func (s *spool) load(instanceID string, now time.Time) []pending {
	due, _, _ := s.loadAll(instanceID, now)
	return due
}

// readSpooled reads and decodes the record at path.
func readSpooled(path string) (spooled, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return spooled{}, err
	}
	return decodeSpooled(data)
}

// RecordSent is recordSent: ctx carrying a record of when a call made with
// it writes its request, and its reader.
var RecordSent = recordSent
