//go:build !windows

package stopsignal

// inWindowsService: only Windows has a Service Control Manager. A variable
// for tests.
var inWindowsService = func() bool { return false }
