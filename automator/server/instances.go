package server

import (
	"context"
	"sync"
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// seenEvery is how stale an instance's recorded last poll may get. Polls
// are frequent (a busy instance polls after every claim): writing each one
// durably would cost a disk sync per poll, so the record is refreshed only
// when the instance changes (host, version) or this long after the last
// write. Listings are at most this stale; "online" allows two poll windows.
const seenEvery = 5 * time.Second

// seenCache remembers what was last written of each instance.
type seenCache struct {
	mu sync.Mutex
	m  map[[2]string]store.InstanceSeenParams
}

// instanceSeen records a poll, skipping the write when the stored record is
// recent and unchanged.
func (s *Server) instanceSeen(ctx context.Context, p store.InstanceSeenParams) error {
	key := [2]string{p.Account, p.InstanceID}
	s.seen.mu.Lock()
	last, ok := s.seen.m[key]
	s.seen.mu.Unlock()
	if ok && last.Hostname == p.Hostname && last.Version == p.Version && p.Now.Sub(last.Now) < seenEvery && p.Now.After(last.Now) {
		return nil
	}
	if err := s.store.InstanceSeen(ctx, p); err != nil {
		return err
	}
	s.seen.mu.Lock()
	if s.seen.m == nil {
		s.seen.m = make(map[[2]string]store.InstanceSeenParams)
	}
	s.seen.m[key] = p
	s.seen.mu.Unlock()
	return nil
}
