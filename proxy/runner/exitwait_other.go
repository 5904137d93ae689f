//go:build !linux

package runner

// awaitExit returns at once: the Wait that follows waits for the process,
// holding a thread meanwhile (see exitwait_linux.go).
func awaitExit(int) {}
