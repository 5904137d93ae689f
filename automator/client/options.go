package client

import (
	"maps"
	"time"
)

// Option adjusts one Submit or ExecuteOnProxy call.
type Option func(*callOptions)

type callOptions struct {
	timeout  time.Duration
	stdin    []byte
	env      map[string]string
	key      string
	onQueued func(id string, deadline time.Time)
}

// WithTimeout sets the time from queueing to the unit's deadline (the
// server's default, 5 minutes, when d is zero or WithTimeout is not given;
// a negative d is refused with InvalidArgument). It bounds the whole unit;
// the context bounds how long this caller waits.
func WithTimeout(d time.Duration) Option { return func(o *callOptions) { o.timeout = d } }

// WithStdin sends b as the script's standard input.
func WithStdin(b []byte) Option { return func(o *callOptions) { o.stdin = b } }

// WithEnv adds environment variables for the script. The proxy sets
// PROXY_WORK_ID, PROXY_ACCOUNT, PROXY_INSTANCE_ID and
// PROXY_DEADLINE_SECONDS itself; they cannot be overridden.
func WithEnv(env map[string]string) Option {
	return func(o *callOptions) {
		if o.env == nil {
			o.env = make(map[string]string, len(env))
		}
		maps.Copy(o.env, env)
	}
}

// WithIdempotencyKey makes the submit happen at most once per key and
// account within the automator's retention window (24 hours by default):
// a repeated call with the key returns the unit the first one made, and its
// outcome, instead of running the command again. Without it the client
// makes a fresh key per call, which covers its own retries only. At most 128
// printable ASCII characters.
func WithIdempotencyKey(key string) Option { return func(o *callOptions) { o.key = key } }

// WithOnQueued has ExecuteOnProxy call f once the automator has queued the
// unit, before it waits for it: with the unit's id and its deadline on
// this host's clock (from the time remaining the automator told), so
// that a caller that stops waiting, cut short, can still say which unit
// it leaves. Submit, which returns them, does not call it.
func WithOnQueued(f func(id string, deadline time.Time)) Option {
	return func(o *callOptions) { o.onQueued = f }
}

func collect(opts []Option) callOptions {
	var o callOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}
