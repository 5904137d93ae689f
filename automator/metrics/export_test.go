package metrics

import "time"

// ScrapesJoined is how many scrapes shared a read of the per-account
// statistics already in progress.
func (m *Metrics) ScrapesJoined() int {
	m.accounts.mu.Lock()
	defer m.accounts.mu.Unlock()
	return m.accounts.joined
}

// SetSlowStoreCall sets the threshold of slow calls of st, a store made by
// Store.
func SetSlowStoreCall(st any, d time.Duration) { st.(*timedStore).slow.threshold = d }
