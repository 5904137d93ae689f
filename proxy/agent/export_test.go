package agent

import "time"

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
