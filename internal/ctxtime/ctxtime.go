// Package ctxtime waits as time.Sleep does, but no longer than a context
// lives: the back-off of the automator's Go client and of the proxy's poll
// loop, which must stop at once when they are cancelled, and the bench's
// paced loops.
package ctxtime

import (
	"context"
	"time"
)

// Sleep waits for d or until ctx is done, whichever comes first, and
// reports whether it waited all of d.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
