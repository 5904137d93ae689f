package metrics

// ScrapesJoined is how many scrapes shared a read of the per-account
// statistics already in progress.
func (m *Metrics) ScrapesJoined() int {
	m.accounts.mu.Lock()
	defer m.accounts.mu.Unlock()
	return m.accounts.joined
}
