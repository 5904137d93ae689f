package automatortest

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/opsgate/opsgate/crypto"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
	"github.com/opsgate/opsgate/proxy/agent"
)

// ProxyOptions describe one proxy instance.
type ProxyOptions struct {
	InstanceID string
	// ScriptsDir holds the scripts it may run.
	ScriptsDir     string
	MaxConcurrency int // 4
	// MaxOutput bounds each output stream of a script (the proxy's
	// max_output_bytes; its default when zero).
	MaxOutput int
	// Log receives the instance's log (discarded when nil).
	Log io.Writer
	// GracePeriod is how long Stop lets running scripts end (5s when
	// zero) before it kills them and reports their units failed.
	GracePeriod time.Duration
	// AllowedEnv is the variables a command may set (the proxy's
	// allowed_env; none when empty).
	AllowedEnv []string
}

// Proxy is a running proxy instance of the automator's account.
type Proxy struct {
	agent    *agent.Agent
	stopOnce sync.Once
	stop     func()
}

// StartProxy runs a proxy instance (the real agent and script runner) until
// Stop or the end of the test.
func (a *Automator) StartProxy(t testing.TB, o ProxyOptions) *Proxy {
	t.Helper()
	logW := o.Log
	if logW == nil {
		logW = io.Discard
	}
	grace := o.GracePeriod
	if grace == 0 {
		grace = 5 * time.Second
	}
	conn := a.ProxyConn(t)
	ag := agent.New(agent.Options{
		Client:         automatorv1.NewProxyServiceClient(conn),
		Keys:           crypto.Keys{a.Key},
		InstanceID:     o.InstanceID,
		Hostname:       "test-host",
		Version:        "test",
		ScriptsDir:     o.ScriptsDir,
		MaxConcurrency: o.MaxConcurrency,
		MaxOutput:      o.MaxOutput,
		AllowedEnv:     o.AllowedEnv,
		PollWait:       time.Second,
		GracePeriod:    grace,
		BackoffMin:     10 * time.Millisecond,
		BackoffMax:     200 * time.Millisecond,
		Logger:         slog.New(slog.NewTextHandler(logW, nil)),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = ag.Run(ctx); close(done) }()
	p := &Proxy{agent: ag}
	p.stop = func() { cancel(); <-done }
	t.Cleanup(p.Stop)
	return p
}

// Stop stops the instance and waits until it has.
func (p *Proxy) Stop() { p.stopOnce.Do(p.stop) }

// WaitPolling waits until the instance's first poll succeeded, so work
// queued from now on is claimed without waiting for a reconnect.
func (p *Proxy) WaitPolling(t testing.TB) {
	t.Helper()
	WaitFor(t, 10*time.Second, "the proxy instance to poll", func() bool { return !p.agent.LastPoll().IsZero() })
}
