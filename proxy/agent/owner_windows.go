package agent

// ownLike: Windows files take their access from the folder (the state
// folder's access list); nothing to give.
func ownLike(path, dir string) error { return nil }
