package dashboard

import (
	"context"
	"fmt"
)

// WaitStreamsEnded waits until at least n event streams of d have ended
// (their handlers returned), or ctx ends.
func (d *Dashboard) WaitStreamsEnded(ctx context.Context, n int) error {
	for {
		ended, changed := d.streamsEnded.get()
		if ended >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("%d event streams ended, want %d: %w", ended, n, ctx.Err())
		}
	}
}

// WholeChunk is the most units a page listed with their sealed blobs
// reads a query.
const WholeChunk = wholeChunk
