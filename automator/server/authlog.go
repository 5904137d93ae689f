package server

import (
	"log/slog"
	"time"

	"github.com/opsgate/opsgate/internal/loglimit"
)

// The log lines of failed authentications are bounded for the whole
// automator, not per source: the failure budget (ratelimit.go) lets each
// source address fail failed_auth_burst times, so a client holding many
// addresses (a botnet, an IPv6 prefix) would otherwise write a line per
// attempt. At most authLogLines failures get a line of their own per
// authLogEvery; the rest are counted, and one line says how many once the
// interval is over (internal/loglimit, which bounds the other such lines:
// loglines.go). The audit log and the metric still see each one.
const (
	authLogEvery = time.Minute
	authLogLines = 20
)

// AuthMetrics is implemented by a Metrics that also counts failed
// authentications (package metrics does).
type AuthMetrics interface {
	// AuthFailed: a call or sign-in presented a missing, wrong, expired
	// or revoked credential; limited: its source was over its budget.
	AuthFailed(limited bool)
}

// newAuthFailLog bounds the lines of failed authentications.
func newAuthFailLog(log *slog.Logger, clock Clock) *loglimit.Limiter {
	return &loglimit.Limiter{Logger: log, Level: slog.LevelWarn, Now: clock.Now,
		Every: authLogEvery, Lines: authLogLines,
		Summary:      "failed authentications not logged one by one",
		SummaryAttrs: []any{slog.String("see", "the audit log (auth.failed) and automator_auth_failures_total")}}
}
