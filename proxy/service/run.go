package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/kardianos/service"
)

// RunOptions configure Run.
type RunOptions struct {
	// Name is the installed service's name.
	Name string
	// StopTimeout bounds how long Stop waits for the function to return
	// after cancelling its context (DefaultStopTimeout when zero).
	StopTimeout time.Duration
	// Stderr receives the log when no system logger can be opened (no
	// /dev/log in a container, say), and the note saying so.
	Stderr io.Writer
	// LogFormat is the format of fn's log, "text" (the default) or "json":
	// Run's own lines take it too, so that every line is of one format.
	LogFormat string
}

// NewLogger logs to w as text, or as one JSON object per line when format
// is "json": the log of a program run as a service and of Run itself.
// JSON gives a duration as text ("1.5s"), as the text format does, not as
// a count of nanoseconds.
func NewLogger(w io.Writer, format string) *slog.Logger {
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{ReplaceAttr: durationText}))
	}
	return slog.New(slog.NewTextHandler(w, nil))
}

// durationText is a slog.HandlerOptions.ReplaceAttr that writes a duration
// as its text.
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// Run runs fn as the service o.Name until the service is stopped, and
// returns fn's error. fn logs its own error, if it wants it logged: Run
// does not, so that it is not logged twice.
//
// fn gets a context that is cancelled when the service is to stop: SIGTERM
// or SIGINT (which cancel ctx, as for a program run by hand) on Linux, a
// stop or shutdown request of the Service Control Manager on Windows. So a
// service stop takes the same path as Ctrl-C. fn's log goes to the writer
// it gets: the system log (journald or syslog, the Windows Event Log) when
// one can be opened, o.Stderr otherwise.
//
// The service's Start returns at once, leaving fn running; its Stop cancels
// fn's context and waits for fn at most StopTimeout. If fn returns on its
// own, the service ends with its error, and the service manager restarts it
// (systemd Restart=always, the SysV supervisor, Windows recovery actions).
func Run(ctx context.Context, o RunOptions, fn func(ctx context.Context, log io.Writer) error) error {
	if err := CheckName(o.Name); err != nil {
		return err
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = DefaultStopTimeout
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	p := &program{ctx: runCtx, cancel: cancel, done: make(chan struct{}), stopTimeout: o.StopTimeout, name: o.Name}
	// Linux: wait for ctx (SIGTERM, caught by main) or for fn to end, then
	// Stop. Windows ignores RunWait: the control manager calls Stop.
	runWait := func() {
		select {
		case <-ctx.Done():
		case <-p.done:
		}
	}
	svc, err := newService(Spec{Name: o.Name}, p, service.KeyValue{"RunWait": runWait})
	if err != nil {
		return err
	}
	if !managed() {
		// A Windows console: there is no control manager to talk to.
		p.fn = func(ctx context.Context) error { return fn(ctx, o.Stderr) }
		_ = p.Start(svc)
		select {
		case <-ctx.Done():
			return p.Stop(svc)
		case <-p.done:
			return p.err
		}
	}
	logw := io.Writer(o.Stderr)
	if l, err := systemLogger(svc); err != nil {
		NewLogger(o.Stderr, o.LogFormat).Warn("no system log; logging here", "service", o.Name, "err", err)
	} else if l != nil {
		logw = LogWriter(l)
	}
	p.fn = func(ctx context.Context) error { return fn(ctx, logw) }
	watchEarlyExit(p, NewLogger(logw, o.LogFormat))
	return svc.Run()
}

// program is the kardianos side of Run.
type program struct {
	name        string
	fn          func(context.Context) error
	ctx         context.Context
	cancel      context.CancelFunc
	stopTimeout time.Duration
	stopping    atomic.Bool

	done chan struct{} // closed when fn has returned
	err  error         // fn's error, valid once done is closed
}

// Start runs fn in the background and returns at once.
func (p *program) Start(service.Service) error {
	go func() {
		p.err = p.fn(p.ctx)
		close(p.done)
	}()
	return nil
}

// Stop cancels fn's context and waits for fn, at most stopTimeout.
func (p *program) Stop(service.Service) error {
	p.stopping.Store(true)
	p.cancel()
	t := time.NewTimer(p.stopTimeout)
	defer t.Stop()
	select {
	case <-p.done:
		return p.err
	case <-t.C:
		return fmt.Errorf("service %s did not stop within %v", p.name, p.stopTimeout)
	}
}
