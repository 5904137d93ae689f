//go:build windows

package runner

import "time"

// Reaper does nothing on windows: each script's job object is closed when
// the proxy dies, however it dies, which kills the script's tree.
type Reaper struct{}

// NewReaper returns a Reaper that starts no process.
func NewReaper(func(error), ReaperLog) *Reaper { return &Reaper{} }

// Close does nothing.
func (*Reaper) Close() error { return nil }

func (*Reaper) prepare(string) {}

func (*Reaper) notStarted(string) {}

func (*Reaper) register(int, string) (deregister func()) { return func() {} }

func ignoreStopSignals() {}

// reapSession is never needed: no reaper is started on windows.
func reapSession(int, uint64) (bool, error) { return false, nil }

// startingScripts is never needed either.
func startingScripts(map[string]bool, time.Duration) map[int]foundSession { return nil }
