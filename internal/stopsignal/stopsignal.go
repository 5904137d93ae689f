// Package stopsignal names the signals that ask a command of the automator
// or the proxy to stop (serve and run stop gracefully, exec cancels its
// unit).
package stopsignal

import (
	"context"
	"os"
	"os/signal"
	"slices"
	"sync/atomic"
	"syscall"
	"time"
)

// List is the interrupt (Ctrl-C), SIGTERM (a service manager's stop) and
// SIGHUP (the terminal closed: an SSH session dropped), unless the
// process was started with SIGHUP ignored (nohup), which it then stays:
// handling it would end a command its operator meant to outlive the
// terminal.
//
// Under the Windows Service Control Manager it is empty: there the control
// manager's stop and shutdown requests stop the service, and Go turns the
// console events a service process gets when any user logs off
// (CTRL_LOGOFF_EVENT) into SIGTERM, so a service watching for it would
// stop, and be restarted, at every logoff.
func List() []os.Signal {
	if inWindowsService() {
		return nil
	}
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !hupIgnoredAtStart {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}

// hupIgnoredAtStart tells that this process was started with SIGHUP
// ignored (read before any Notify, which takes the ignoring off).
var hupIgnoredAtStart = signal.Ignored(syscall.SIGHUP)

// ChildrenGetDefaultHUP gives the programs this process starts SIGHUP's
// default action when it was started with SIGHUP ignored (nohup), which
// they would inherit otherwise: a signal ignored stays ignored across
// exec, one a handler takes is reset to its default. This process goes on
// dropping it. The proxy calls it first thing: the scripts of a proxy
// started with nohup ignored SIGHUP (a review).
func ChildrenGetDefaultHUP() {
	if hupIgnoredAtStart {
		signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP)
	}
}

// Stopping is called once the first signal of List has come, with the
// stop function of the signal.NotifyContext that watched for them: a
// second interrupt or SIGTERM then ends the process at once, by that
// signal, as its default does, once the last words set (SetLastWords), if
// any, are said. A second SIGHUP does not: a closed terminal sends more
// than one (the shell passes its own on to its jobs, and the kernel sends
// the foreground group another when the shell exits), and it would kill
// the command while it stops (exec cancelling its unit). It is ignored
// from then on.
//
// An interrupt or SIGTERM the process was started with ignored (a
// background job of a script ignores SIGINT) would be ignored again once
// let go, so that a second one changed nothing: such a one ends the
// process with the code a shell gives a command the signal killed (128 +
// its number).
func Stopping(stop func()) {
	signal.Ignore(syscall.SIGHUP)
	var again chan os.Signal
	if len(List()) > 0 {
		again = make(chan os.Signal, 1)
		signal.Notify(again, os.Interrupt, syscall.SIGTERM) // before stop: never let go in between
	}
	stop()
	if again != nil {
		go func() {
			s := <-again
			if f := lastWords.Load(); f != nil {
				// Said within lastWordsWithin: a stderr that does not
				// drain (a pager that stopped reading, a terminal
				// paused with Ctrl-S) must not keep the process from
				// ending; nor must a third signal wait for them.
				said := make(chan struct{})
				go func() { (*f)(); close(said) }()
				select {
				case <-said:
				case <-time.After(lastWordsWithin):
				case s = <-again:
				}
			}
			code := 1
			if n, ok := s.(syscall.Signal); ok {
				code = 128 + int(n)
			}
			if !slices.Contains(ignoredAtStart, s) {
				raise(s)
			}
			os.Exit(code)
		}()
	}
}

// lastWordsWithin bounds the saying of the last words: a write to a
// stderr that drains takes far less.
const lastWordsWithin = 200 * time.Millisecond

// lastWords is what is said before a second signal ends the process.
var lastWords atomic.Pointer[func()]

// SetLastWords makes f what is said before a second interrupt or SIGTERM
// ends the process (Stopping): exec, waiting for the cancel of its unit,
// says how to follow the unit it leaves. nil says nothing.
func SetLastWords(f func()) {
	if f == nil {
		lastWords.Store(nil)
		return
	}
	lastWords.Store(&f)
}

// ignoredAtStart are the interrupt and SIGTERM when this process was
// started with them ignored (read before any Notify, which takes the
// ignoring off).
var ignoredAtStart = func() []os.Signal {
	var sigs []os.Signal
	for _, s := range []os.Signal{os.Interrupt, syscall.SIGTERM} {
		if signal.Ignored(s) {
			sigs = append(sigs, s)
		}
	}
	return sigs
}()

// NotifyContext is signal.NotifyContext of parent with List: a context the
// first of those signals ends. With List empty, nothing but stop ends it
// (signal.NotifyContext with no signal would take every one).
func NotifyContext(parent context.Context) (context.Context, context.CancelFunc) {
	if sigs := List(); len(sigs) > 0 {
		return signal.NotifyContext(parent, sigs...)
	}
	return context.WithCancel(parent)
}
