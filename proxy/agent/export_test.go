package agent

// PostsWaiting is how many results wait for the post on its way.
func (a *Agent) PostsWaiting() int { return a.poster.group.Waiting() }
