package runner

import (
	"io"
	"os"
	"os/exec"
	"sync"
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
// to end before the pipes are closed under them.
type stdio struct {
	stdout, stderr capture
	stdin          []byte

	childEnds []*os.File // given to the child; closed here once it started
	outR      *pipeEnd
	errR      *pipeEnd
	inW       *pipeEnd // nil when there is no stdin
	copies    sync.WaitGroup
}

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
	}
	return s, nil
}

// started closes the child's ends (the child has its own copies) and starts
// copying: the output streams into their captures, stdin into the script.
func (s *stdio) started() {
	s.closeChildEnds()
	s.copies.Add(2)
	go s.drain(&s.stdout, s.outR)
	go s.drain(&s.stderr, s.errR)
	if s.inW != nil {
		s.copies.Add(1)
		go func() {
			defer s.copies.Done()
			// An error means the script did not read it all; that is its
			// business, like a shell pipeline's.
			_, _ = s.inW.f.Write(s.stdin)
			s.inW.close()
		}()
	}
}

func (s *stdio) drain(c *capture, r *pipeEnd) {
	defer s.copies.Done()
	_, _ = io.Copy(c, r.f) // capture never fails; a read error ends the stream
	r.close()
}

// finish waits for the copies to end, at most delay, then closes the pipes
// under them and waits for them to notice. After finish the captures are
// safe to read.
func (s *stdio) finish(delay time.Duration) {
	done := make(chan struct{})
	go func() {
		s.copies.Wait()
		close(done)
	}()
	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		s.closeParentEnds()
		<-done
	}
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
