//go:build !windows && !linux

package runner

import "time"

// killSession does nothing where processes are not listed in /proc: the
// process group kill is all there is.
func killSession(int) error { return nil }

// killSessionAfterExit does nothing either, for the same reason.
func killSessionAfterExit(int, time.Duration) error { return nil }
