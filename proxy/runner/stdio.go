package runner

import (
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"
)

// stdio owns the pipes of the script's standard streams.
//
// The runner makes these pipes itself instead of letting os/exec copy
// through its own: with *os.File streams, cmd.Wait returns as soon as the
// script exits, so the runner can kill what the script left behind at once.
// With os/exec's pipes, Wait would first wait (up to cmd.WaitDelay) for those
// leftovers to close the pipes, and only then could they be killed. The
// WaitDelay idea survives in finish: after the kill, the copies get waitDelay
// (of this process's running time) to end before the pipes are closed under
// them.
type stdio struct {
	stdout, stderr capture
	stdin          []byte

	childEnds []*os.File // given to the child; closed here once it started
	outR      *pipeEnd
	errR      *pipeEnd
	inW       *pipeEnd // nil when there is no stdin

	copies  atomic.Int32  // copies still running
	copied  chan struct{} // closed when the last copy ends
	running bool          // the copies were started

	// cutOff, when set (by tests), is called once finish's delay is
	// over and the held pipes were closed.
	cutOff func()
}

// devNull is the null device, opened once and shared, read-only, as the
// standard input of every script run without stdin (os/exec would open it
// for each).
var devNull = sync.OnceValue(func() *os.File {
	f, err := os.Open(os.DevNull)
	if err != nil {
		return nil // os/exec opens it itself
	}
	return f
})

// pipeEnd is a parent's end of a pipe, closed exactly once by whichever of
// the copy goroutine and finish gets there first.
type pipeEnd struct {
	f    *os.File
	once sync.Once
}

func (p *pipeEnd) close() {
	if p != nil {
		p.once.Do(func() { p.f.Close() })
	}
}

// closeIfHeld closes the end if a process still holds the pipe's other
// end, which may then keep a copy on it waiting for ever. A copy on a pipe
// whose other end nobody holds ends by itself as soon as it runs (at the
// end of the output, or as the script is gone), however long it waited to
// be scheduled: its end is left open, and the output it has yet to read is
// kept.
func (p *pipeEnd) closeIfHeld() {
	if p != nil && otherEndHeld(p.f) {
		p.close()
	}
}

// attachStdio makes the pipes and sets them as cmd's standard streams.
func attachStdio(cmd *exec.Cmd, stdin []byte, maxOutput int) (*stdio, error) {
	s := &stdio{
		stdout: capture{max: maxOutput},
		stderr: capture{max: maxOutput},
		stdin:  stdin,
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	s.outR, s.childEnds = &pipeEnd{f: outR}, append(s.childEnds, outW)
	errR, errW, err := os.Pipe()
	if err != nil {
		s.abort()
		return nil, err
	}
	s.errR, s.childEnds = &pipeEnd{f: errR}, append(s.childEnds, errW)
	cmd.Stdout, cmd.Stderr = outW, errW
	if len(stdin) > 0 {
		inR, inW, err := os.Pipe()
		if err != nil {
			s.abort()
			return nil, err
		}
		s.inW, s.childEnds = &pipeEnd{f: inW}, append(s.childEnds, inR)
		cmd.Stdin = inR
	} else if f := devNull(); f != nil {
		cmd.Stdin = f
	}
	return s, nil
}

// started closes the child's ends (the child has its own copies) and starts
// copying: the output streams into their captures, stdin into the script.
func (s *stdio) started() {
	s.closeChildEnds()
	s.running = true
	s.copied = make(chan struct{})
	n := int32(2)
	if s.inW != nil {
		n++
	}
	s.copies.Store(n)
	go s.drain(&s.stdout, s.outR)
	go s.drain(&s.stderr, s.errR)
	if s.inW != nil {
		go func() {
			defer s.copyDone()
			// An error means the script did not read it all; that is its
			// business, like a shell pipeline's.
			_, _ = s.inW.f.Write(s.stdin)
			s.inW.close()
		}()
	}
}

func (s *stdio) drain(c *capture, r *pipeEnd) {
	defer s.copyDone()
	_, _ = c.ReadFrom(r.f) // a read error ends the stream
	r.close()
}

// copyDone counts a copy out; the last one closes s.copied.
func (s *stdio) copyDone() {
	if s.copies.Add(-1) == 0 {
		close(s.copied)
	}
}

// finishSteps is the number of steps in which finish gives the copies their
// delay.
const finishSteps = 20

// finish waits for the copies to end, for at most about delay of this
// process's running time, then closes the pipes under them and waits for
// them to notice. After finish the captures are safe to read.
func (s *stdio) finish(delay time.Duration) {
	if !s.running {
		s.closeParentEnds()
		return
	}
	select {
	case <-s.copied: // the usual case: the script's output already ended
		s.closeParentEnds()
		return
	default:
	}
	ticker := time.NewTicker(max(delay/finishSteps, time.Millisecond))
	defer ticker.Stop()
	s.await(ticker.C, finishSteps)
}

// await waits for the copies to end or for n ticks, whichever comes first,
// then closes the pipes that a process still holds (closeIfHeld) and waits
// for the copies to end.
//
// It counts ticks rather than waiting for one timer so that the wait is
// this process's running time: if the whole process is stopped while it
// waits (SIGSTOP, a suspended VM), a timer of the whole delay would have
// expired on resume together with the copy goroutines becoming runnable,
// and the pipes could be closed under output they had not read yet (the
// likely cause of an echo's output lost in a chaos run with a proxy-pause).
// A ticker fires once on resume: one step of n. Copies that have not run
// for the whole delay are not cut off for it either, unless the pipe is
// still held: a proxy running many scripts on few cores may leave a
// goroutine unscheduled for a second or more (64 tiny scripts at once on 2
// cores: about one batch of 2,000 in three had a script whose "ok" was lost
// so, its copy not run for 2 s though the pipe held the output).
func (s *stdio) await(ticks <-chan time.Time, n int) {
	for range n {
		select {
		case <-s.copied:
			s.closeParentEnds()
			return
		case <-ticks:
		}
	}
	s.outR.closeIfHeld()
	s.errR.closeIfHeld()
	s.inW.closeIfHeld()
	if s.cutOff != nil {
		s.cutOff()
	}
	<-s.copied
	s.closeParentEnds()
}

// abort closes every pipe; the process did not start.
func (s *stdio) abort() {
	s.closeChildEnds()
	s.closeParentEnds()
}

func (s *stdio) closeChildEnds() {
	for _, f := range s.childEnds {
		f.Close()
	}
	s.childEnds = nil
}

func (s *stdio) closeParentEnds() {
	s.outR.close()
	s.errR.close()
	s.inW.close()
}
