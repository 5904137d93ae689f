package server

// DoneSubscriptions counts callers' subscriptions to the end of units, so
// tests can check that none is left behind.
func (s *Server) DoneSubscriptions() int {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	n := 0
	for _, m := range s.hub.done {
		n += len(m)
	}
	return n
}

// WaitingPolls counts the polls of account waiting for work.
func (s *Server) WaitingPolls(account string) int { return s.hub.waiting(account) }
