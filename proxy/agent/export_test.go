package agent

// PostsWaiting is how many results wait for the post on its way.
func (a *Agent) PostsWaiting() int { return a.poster.waiting() }

func (p *poster) waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue)
}
