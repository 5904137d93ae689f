//go:build !windows && !linux

package runner

import "time"

// killSession does nothing where processes are not listed in /proc: the
// process group kill is all there is.
func killSession(int) error { return nil }

// killDescendants does nothing either: without /proc no parent is known.
func killDescendants(int) error { return nil }

// sessionHasMember finds no process outside the session's group, for the
// same reason.
func sessionHasMember(int) bool { return false }

// liveSessionMember is not known without /proc: sessionLives asks the
// process group.
func liveSessionMember(int) (live, known bool) { return false, false }

// killSessionAfterExit does nothing either, for the same reason.
func killSessionAfterExit(int, time.Duration) error { return nil }

// processStartTime is unknown (0) without /proc: the reaper kills a
// registered session's group without checking that its pid was not reused.
func processStartTime(int) (uint64, error) { return 0, nil }

// startingScripts finds nothing without /proc: a script started as its
// proxy died, before the proxy told the reaper of it, outlives the proxy.
func startingScripts(map[string]bool, time.Duration) map[int]foundSession { return nil }
