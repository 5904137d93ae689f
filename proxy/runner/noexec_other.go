//go:build !linux

package runner

// OnNoExec reports false: only on Linux is the mount flag looked up.
func OnNoExec(string) bool { return false }
