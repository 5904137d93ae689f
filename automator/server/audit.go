package server

import (
	"context"
	"net"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/opsgate/opsgate/automator/store"
)

// sweeperActor is the audit actor of units that reach their deadline.
const sweeperActor = "automator"

// actorFrom names who makes the call in ctx for the audit log: the API key
// of a caller, the account of a proxy; "" before authentication.
func actorFrom(ctx context.Context) string {
	if c := callerOf(ctx); c != nil {
		return "apikey:" + c.id
	}
	if a := accountFrom(ctx); a != "" {
		return "account:" + a
	}
	return ""
}

// sourceOf is the IP address a call came from, for the audit log and the
// failed-authentication budget. A call the HTTP gateway relays reaches the
// gRPC server over an in-memory pipe (network "pipe"); the gateway appends
// its HTTP client's address last to x-forwarded-for, so that value is used
// then, and only then: a network caller's own x-forwarded-for is never
// trusted, its peer is TCP.
func sourceOf(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	if p.Addr.Network() == "pipe" {
		if fwd := metadata.ValueFromIncomingContext(ctx, "x-forwarded-for"); len(fwd) > 0 {
			parts := strings.Split(fwd[len(fwd)-1], ",")
			return clip(strings.TrimSpace(parts[len(parts)-1]))
		}
		return "http-gateway"
	}
	addr := p.Addr.String()
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return clip(addr)
}

// clip bounds a value taken from a request before it is logged or stored,
// as text every store takes: bytes that are not UTF-8 and NUL (an HTTP
// path's %00, %C3 alone), which PostgreSQL refuses in a text column, become
// U+FFFD, and the cut falls between two characters. Else the audit record
// of a failed authentication whose path held one would not be written.
func clip(s string) string {
	const max = 64
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// event starts an audit event of kind about the call in ctx, now.
func (s *Server) event(ctx context.Context, kind, detail string) store.AuditEvent {
	return store.AuditEvent{At: s.clock.Now(), Kind: kind, Actor: actorFrom(ctx), Source: sourceOf(ctx), Detail: detail}
}

// record appends e to the audit log. A failure is logged (storeFailure:
// a caller with a wrong key repeats it, so its lines are bounded as a
// fault's are), not returned: the events written this way describe
// refusals, whose call fails anyway. (A unit's queueing and its end are
// written in the same transaction as the unit, so those cannot be lost.)
func (s *Server) record(ctx context.Context, e store.AuditEvent) {
	if _, err := s.store.AuditAppend(context.WithoutCancel(ctx), e); err != nil {
		s.storeFailure("writing the audit log", err, "kind", e.Kind)
	}
}

// sealScript seals a unit's script name for the audit log, so a copy of
// the database alone does not reveal it (`automator audit` opens it with
// the master key).
func (s *Server) sealScript(workID, script string) ([]byte, error) {
	return s.master.SealAuditField(workID, []byte(script))
}

// methodName is the short name of a gRPC method for logs and the audit
// log: "/automator.v1.AutomatorService/Submit" → "AutomatorService/Submit".
func methodName(full string) string {
	if i := strings.LastIndex(full, "."); i >= 0 {
		return full[i+1:]
	}
	return strings.TrimPrefix(full, "/")
}
