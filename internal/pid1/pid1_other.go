//go:build !linux

package pid1

// Run does nothing outside Linux: it returns false.
func Run() (int, bool) { return 0, false }
