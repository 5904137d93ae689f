package server

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/grpcwire"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

type ctxKey int

const (
	keyAccount ctxKey = iota
	keyCaller
	keyToken
	// keyTapped marks a call TapHandle authenticated: the interceptor
	// does not look its credential up again.
	keyTapped
)

// caller is the API key that authenticated a caller.
type caller struct {
	id string
	// accounts the key may use; empty for every account.
	accounts []string
}

// proxyToken is the account token that authenticated a proxy call, as the
// lookup that accepted it saw it.
type proxyToken struct {
	hash []byte // SHA-256 of the token presented
	// current is the account's current token hash as that lookup read it:
	// hash itself, unless the token was a previous one. While an account
	// read later still has it, no rotation was made in between (a new
	// token is never an old one), so the token is as good as it was.
	current []byte
	// until is the end of the overlap window of a previous token; zero
	// for the current token. A poll authenticated with a previous token
	// ends, and claims nothing, from then on.
	until time.Time
	// keyID and sealedKey are the account's current key as that lookup
	// read it, to tell a cached key ring of an account deleted since and
	// created again under the same name (keyRing.sameAccount).
	keyID     uint32
	sealedKey []byte
	// created is when the account was created: what tells the account
	// from one created again under its name after it was deleted, for the
	// records of its instances' polls (InstanceSeenParams.AccountCreatedAt).
	created time.Time
}

// tokenFrom is the account token that authenticated a proxy call.
func tokenFrom(ctx context.Context) proxyToken {
	t, _ := ctx.Value(keyToken).(proxyToken)
	return t
}

// accountFrom is the account whose token authenticated a proxy call.
func accountFrom(ctx context.Context) string {
	s, _ := ctx.Value(keyAccount).(string)
	return s
}

func callerOf(ctx context.Context) *caller {
	c, _ := ctx.Value(keyCaller).(*caller)
	return c
}

// callerFrom is the API key id that authenticated a caller.
func callerFrom(ctx context.Context) string {
	if c := callerOf(ctx); c != nil {
		return c.id
	}
	return ""
}

// UnaryInterceptor authenticates every call: proxy methods with an account
// token, caller methods with an API key, both as "authorization: Bearer"
// (the scheme in any case). A call TapHandle authenticated already is not
// looked up again.
func (s *Server) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if ctx.Value(keyTapped) == nil {
			var err error
			if ctx, err = s.authenticate(ctx, info.FullMethod, req); err != nil {
				return nil, err
			}
		}
		return handler(ctx, req)
	}
}

// tapLookupTimeout bounds TapHandle's lookup of a credential the store's
// cache does not hold. The lookup holds up the reading of its connection's
// frames, pings included: a proxy gives up a connection whose ping is not
// answered within 5 s (proxy/cli.Keepalive).
const tapLookupTimeout = 3 * time.Second

// TapHandle authenticates a call from its headers, before gRPC reads its
// request: a message of up to 8 MiB, which gRPC receives whole before any
// interceptor runs. Without it, anyone who can reach the listener could
// open calls without a credential, each holding up to 8 MiB of request
// until it is complete, as many as they like on one connection. A call
// refused here gets the status the interceptor would give it (counted
// against its source's failure budget and audited as such), and its
// stream is reset, so its request is never read. An accepted call carries
// what the lookup found to the interceptor, which does not look it up
// again. An expired account token is left to the interceptor, which
// records the poll it refuses (tokenExpiredPoll): its holder held the
// account's token.
//
// A call that takes no credential (the health service's) is bounded
// otherwise (withoutCredential).
//
// The handle runs on the goroutine that reads the connection's frames: a
// credential in the store's cache is checked in memory, and the lookup of
// one that is not is bounded by tapLookupTimeout.
func (s *Server) TapHandle() tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		method := info.FullMethodName
		if !strings.HasPrefix(method, proxyPrefix) && !strings.HasPrefix(method, callerPrefix) {
			return s.withoutCredential(ctx)
		}
		lctx, cancel := context.WithTimeout(ctx, tapLookupTimeout)
		defer cancel()
		actx, err := s.authenticate(context.WithValue(lctx, keyTapped, true), method, nil)
		switch {
		case errors.Is(err, errExpiredToInterceptor):
			return ctx, nil
		case err != nil && lctx.Err() != nil && ctx.Err() == nil:
			// An outage, maybe (a connection cut off without a word
			// answers nothing): the calls that meet it first may be
			// these, and serve's sendAway counts it from then, to
			// check whether the database can be reached. A slow one
			// does this too: no warning.
			s.databaseSilent("doing", "looking up a call's credential", "method", method, "err", fmt.Errorf("no answer within %v: %w", tapLookupTimeout, err))
			return ctx, status.Errorf(codes.Unavailable, "the automator's database did not answer within %v while looking up the call's credential; retry", tapLookupTimeout)
		case err != nil:
			return ctx, err
		}
		for _, k := range []ctxKey{keyToken, keyAccount, keyCaller} {
			if v := actx.Value(k); v != nil {
				ctx = context.WithValue(ctx, k, v)
			}
		}
		return context.WithValue(ctx, keyTapped, true), nil
	}
}

// Calls that carry no credential (the gRPC health service's, for load
// balancers and probes) are bounded apart: gRPC reads each one's request
// whole too (up to 8 MiB) before its handler runs. At most
// uncredentialedPerSource are open at once from one source address, and
// each ends within uncredentialedWithin: a health check answers at once,
// and a call that has not sent its request by then holds nothing longer.
const (
	uncredentialedPerSource = 4
	uncredentialedWithin    = 5 * time.Second
)

// withoutCredential is TapHandle's answer for a call that carries no
// credential: ResourceExhausted when its source has
// uncredentialedPerSource such calls open, else the call, bounded to
// uncredentialedWithin and counted until it ends.
func (s *Server) withoutCredential(ctx context.Context) (context.Context, error) {
	src := sourceOf(ctx)
	if !s.uncredentialed.take(src) {
		return ctx, status.Errorf(codes.ResourceExhausted, "%d calls without a credential (health checks) from %s are open already, the most one source may have", uncredentialedPerSource, src)
	}
	ctx, cancel := context.WithTimeout(ctx, uncredentialedWithin)
	context.AfterFunc(ctx, func() {
		cancel()
		s.uncredentialed.give(src)
	})
	return ctx, nil
}

// openCalls counts the calls without a credential open per source.
type openCalls struct {
	mu sync.Mutex
	n  map[string]int
}

func (o *openCalls) take(src string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n[src] >= uncredentialedPerSource {
		return false
	}
	if o.n == nil {
		o.n = make(map[string]int)
	}
	o.n[src]++
	return true
}

func (o *openCalls) give(src string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n[src]--; o.n[src] <= 0 {
		delete(o.n, src)
	}
}

// tokenExpired refuses an account token past its overlap: replaced by a
// rotation whose overlap has ended (at once, with none).
const tokenExpired = "account token expired: it was rotated and its overlap window has ended; install the account's new profile"

// errExpiredToInterceptor: TapHandle met an expired account token, which
// the interceptor refuses once it has the poll to record.
var errExpiredToInterceptor = errors.New("expired account token: left to the interceptor")

var (
	proxyPrefix  = "/" + automatorv1.ProxyService_ServiceDesc.ServiceName + "/"
	callerPrefix = "/" + automatorv1.AutomatorService_ServiceDesc.ServiceName + "/"
)

// req is the call's request, for a poll refused for an expired token
// (tokenExpiredPoll).
func (s *Server) authenticate(ctx context.Context, method string, req any) (context.Context, error) {
	secret, err := bearer(ctx)
	switch {
	case strings.HasPrefix(method, proxyPrefix):
		if err != nil {
			return nil, s.authFailed(ctx, method, err.Error(), "")
		}
		h := crypto.HashToken(secret)
		a, err := s.store.AccountGetByToken(ctx, store.AccountGetByTokenParams{TokenHash: h, Now: s.clock.Now()})
		switch {
		case errors.Is(err, store.ErrNotFound):
			return nil, s.authFailed(ctx, method, "invalid account token", "")
		case errors.Is(err, store.ErrExpired) && ctx.Value(keyTapped) != nil:
			return nil, errExpiredToInterceptor
		case errors.Is(err, store.ErrExpired):
			// The presenter held this token: telling it that it expired
			// reveals nothing, and tells its operator what to do.
			err := s.authFailed(ctx, method, tokenExpired, "account:"+a.Name)
			if poll, ok := req.(*automatorv1.PollRequest); ok && method == proxyPrefix+"Poll" && status.Code(err) == codes.Unauthenticated {
				// Within the source's budget only (over it, the refusal
				// is ResourceExhausted and nothing more is written).
				s.tokenExpiredPoll(ctx, a, poll)
			}
			return nil, err
		case err != nil:
			return nil, s.internal(ctx, "looking up account token", err)
		}
		ctx = context.WithValue(ctx, keyToken, proxyToken{hash: h, current: a.TokenHash, until: a.PreviousTokenUntil, keyID: a.KeyID, sealedKey: a.SealedKey, created: a.CreatedAt})
		return context.WithValue(ctx, keyAccount, a.Name), nil
	case strings.HasPrefix(method, callerPrefix):
		c, err := s.apiKey(ctx, secret, err, sourceOf(ctx), methodName(method))
		if err != nil {
			return nil, err
		}
		return context.WithValue(ctx, keyCaller, c), nil
	}
	return ctx, nil // health and reflection services carry no secrets
}

// tokenExpiredPoll records poll req, refused because the account token it
// presented was a's before a rotation whose overlap window has ended, as
// its instance's refused poll (store.InstanceSeenParams.TokenExpired):
// listings, the dashboard and the reason of a unit no instance claimed
// tell that it polls with the whole profile of before the rotation,
// rather than show it gone two poll windows later. Only such a token, one
// that was the account's, gets here, never an unknown one; the poll is
// checked as an accepted one is (validPoll) and recorded through the
// seen-cache, so a flood of them writes at most one record per instance
// every seenEvery (within maxSeen instances held), as accepted polls do.
// The proxy is refused all the same, whether or not the poll is recorded.
func (s *Server) tokenExpiredPoll(ctx context.Context, a store.Account, req *automatorv1.PollRequest) {
	if validPoll(req) != nil {
		return
	}
	seen := pollRecord(req, a.Name, a.CreatedAt, s.clock.Now())
	seen.TokenExpired = true
	if err := s.instanceSeen(ctx, seen, pollSeen{run: req.GetRunId(), seq: req.GetPollSeq()}); err != nil && !errors.Is(err, store.ErrTooManyInstances) {
		_ = s.internal(ctx, "recording the instance's poll refused for an expired account token", err)
	}
}

// apiKey returns the caller whose API key is secret (bearerErr: the
// credential was missing or malformed), or the error its call gets: a
// failure is counted against src's budget and audited under what.
func (s *Server) apiKey(ctx context.Context, secret string, bearerErr error, src, what string) (*caller, error) {
	if bearerErr != nil {
		return nil, s.authFailedFrom(ctx, src, what, bearerErr.Error(), "", "")
	}
	k, err := s.store.APIKeyGetByHash(ctx, crypto.HashToken(secret))
	if errors.Is(err, store.ErrNotFound) {
		return nil, s.authFailedFrom(ctx, src, what, "invalid API key", "", "")
	}
	if err != nil {
		return nil, s.internal(ctx, "looking up API key", err)
	}
	// The store may answer from its credential cache, which a revoke
	// waits out (store.CachedCredentials): a revoke still applies to
	// every call made after it returned.
	if !k.RevokedAt.IsZero() {
		return nil, s.authFailedFrom(ctx, src, what, "API key "+k.ID+" was revoked", "apikey:"+k.ID, "")
	}
	return &caller{id: k.ID, accounts: k.Accounts}, nil
}

// AuthenticateCaller checks the API key of a call of the HTTP/JSON API
// (authorization: the values of its Authorization header) before the
// gateway reads the request's body, so a caller without a valid key cannot
// make the automator read and hold a body of up to 16 MiB. It returns
// the status the call would get from the interceptor (Unauthenticated, or
// ResourceExhausted past the failure budget of source, the client's
// address), counted and audited as such under what (the request's method
// and path); nil for a key the interceptor accepts, which then checks it
// again, as for every call.
func (s *Server) AuthenticateCaller(ctx context.Context, authorization []string, source, what string) error {
	secret, err := bearerOf(authorization)
	_, err = s.apiKey(ctx, secret, err, clip(source), clip(what))
	return err
}

func bearer(ctx context.Context) (string, error) {
	// Only this key's values are copied, not the whole metadata.
	return bearerOf(metadata.ValueFromIncomingContext(ctx, "authorization"))
}

func bearerOf(vals []string) (string, error) {
	if len(vals) > 1 {
		return "", errors.New("more than one authorization metadata value: send one Bearer token")
	}
	if len(vals) == 0 {
		return "", errors.New("missing authorization metadata (Bearer token)")
	}
	tok, ok := cutScheme(vals[0], "Bearer ")
	if !ok || tok == "" {
		return "", errors.New("authorization metadata is not \"Bearer <secret>\"")
	}
	return tok, nil
}

// cutScheme is strings.CutPrefix(v, scheme) with the scheme's case
// ignored: an authentication scheme is a case-insensitive token (RFC 9110
// 11.1, RFC 6750 2.1), so "bearer x" and "BEARER x" are "Bearer x". Only
// the scheme: the space after it and the secret are taken as they are.
func cutScheme(v, scheme string) (string, bool) {
	// The scheme is ASCII: len(scheme) bytes of v fold to it only when
	// they are as many ASCII characters (one of more bytes would leave too
	// few characters), so this ignores the case of ASCII letters and
	// nothing else.
	if len(v) < len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) {
		return v, false
	}
	return v[len(scheme):], true
}

// authFailed spends one failure of the caller's source address. Within its
// budget the failure is logged and audited (with the peer address and the
// reason, never the secret) and the caller gets Unauthenticated; over it,
// the caller gets ResourceExhausted and only the first such refusal is
// logged and audited, so a flood of bad credentials costs a bounded number
// of writes. actor names the credential when it was recognised (a revoked
// key, an expired token).
func (s *Server) authFailed(ctx context.Context, method, why, actor string) error {
	what := methodName(method)
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get(grpcwire.HeaderStatusCheck)) > 0 {
		// Not a result posted: a config checked, a standby's perhaps.
		what += " (`proxy status` checking a config)"
	}
	instance := ""
	if strings.HasPrefix(method, proxyPrefix) {
		instance = claimedInstance(ctx) // a proxy's call only (a caller's would name what it likes)
	}
	return s.authFailedFrom(ctx, sourceOf(ctx), what, why, actor, instance)
}

// authFailedFrom is authFailed of a call from src, audited under what;
// instance is the instance a proxy's call says it runs as, or "".
func (s *Server) authFailedFrom(ctx context.Context, src, what, why, actor, instance string) error {
	if retry, limited := s.failedFrom(ctx, src, what, why, actor, instance); limited {
		return retryLater(grpcwire.ReasonTooManyFailedAuthentications, nil, retry, "too many failed authentications from %s (this one: %s); retry in %v", src, why, retry)
	}
	return status.Error(codes.Unauthenticated, why)
}

// retryLater is a ResourceExhausted status for a refusal that the same
// call made again after retry may get past: it says so in a
// google.rpc.RetryInfo detail, which the HTTP gateway makes a Retry-After
// header, and which limit refused it in a google.rpc.ErrorInfo (reason, one
// of grpcwire's, with metadata), so that a caller tells a unit it may submit
// again (nothing was queued) from a wrong API key. A refusal that no wait
// mends (a message over the size limit) or whose end no one can tell (a
// full disk) carries neither.
func retryLater(reason string, metadata map[string]string, retry time.Duration, format string, args ...any) error {
	st := status.Newf(codes.ResourceExhausted, format, args...)
	if d, err := st.WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(retry)},
		&errdetails.ErrorInfo{Reason: reason, Domain: grpcwire.ErrorDomain, Metadata: metadata},
	); err == nil {
		st = d
	}
	return st.Err()
}

// SignInFailed records a sign-in to the dashboard refused for a wrong or
// revoked API key, from source (the client's address), as a failed
// authentication: audited, and counted against the source's budget as a
// refused call is. limited: the budget is spent, and the sign-in is to be
// refused as such until retry has passed.
func (s *Server) SignInFailed(ctx context.Context, source, why string) (retry time.Duration, limited bool) {
	return s.failedFrom(ctx, clip(source), "dashboard sign-in", why, "", "")
}

// SignInDenied records a sign-in to the dashboard refused for a valid API
// key that may not sign in (a scoped one, why says so), from source, as a
// call outside a key's scope is: counted, audited (auth.denied), and its
// log lines bounded. It is not a failed authentication: the key is good.
func (s *Server) SignInDenied(ctx context.Context, source, keyID, why string) {
	s.refusalMetrics.AuthDenied()
	s.deniedLog.Log("API key may not sign in to the dashboard", "api_key", keyID, "peer", clip(source), "reason", why)
	s.record(ctx, store.AuditEvent{At: s.clock.Now(), Kind: store.AuditAuthDenied, Actor: "apikey:" + keyID, Source: clip(source), Detail: "dashboard sign-in: " + why})
}

// SignedIn records a sign-in to the dashboard with API key keyID from
// source (the client's address) in the audit log. An error: the record was
// not written, and the sign-in is to be refused (no session issued), as an
// administrative change whose record cannot be written is not made.
func (s *Server) SignedIn(ctx context.Context, source, keyID string) error {
	_, err := s.store.AuditAppend(ctx, store.AuditEvent{At: s.clock.Now(), Kind: store.AuditDashboardSignIn, Actor: "apikey:" + keyID, Source: clip(source)})
	return err
}

// SignOutEvent is the audit record of a sign-out of a dashboard session
// made with API key keyID, from source: the dashboard passes it with the
// sign-out (store.DashboardSessionEndParams.Audit), so the session ends
// only with its record.
func (s *Server) SignOutEvent(source, keyID string) store.AuditEvent {
	return store.AuditEvent{At: s.clock.Now(), Kind: store.AuditDashboardSignOut, Actor: "apikey:" + keyID, Source: clip(source)}
}

// claimedInstance is the instance id a proxy's call says it runs as
// (grpcwire.HeaderInstance), when it is one an instance may have; "" when
// none is said. The caller's claim, not a credential: it names the
// instance in what the refusal of its call logs.
func claimedInstance(ctx context.Context) string {
	v := metadata.ValueFromIncomingContext(ctx, grpcwire.HeaderInstance)
	// Text: a binary header may carry any bytes, which a request's
	// instance_id (protobuf checks it) never does, and the audit log
	// takes text only (PostgreSQL refused the record: a re-review).
	if len(v) == 0 || !utf8.ValidString(v[0]) || validID("instance_id", v[0]) != nil {
		return ""
	}
	return v[0]
}

// failedFrom counts a failed authentication of what (a method, the
// dashboard's sign-in) from src against its budget and audits it.
func (s *Server) failedFrom(ctx context.Context, src, what, why, actor, instance string) (retry time.Duration, limited bool) {
	now := s.clock.Now()
	ok, first := s.failures.fail(src, now)
	// The credential, when recognised, tells the operator whose it is:
	// the account of an expired token, the id of a revoked API key.
	attrs := []any{"method", what, "peer", src, "reason", why}
	if actor != "" {
		attrs = append(attrs, "actor", actor)
	}
	detail := what + ": " + why
	if instance != "" {
		// Which proxy holds the wrong credential: its address may be a
		// NAT's, shared by every proxy of a site.
		attrs = append(attrs, "instance_id", instance)
		detail += " (instance " + instance + ")"
	}
	s.authMetrics.AuthFailed(!ok)
	if !ok {
		if first {
			s.authFailLog.Log("too many failed authentications: refusing further failures from this source for a while", attrs...)
			s.record(ctx, store.AuditEvent{At: now, Kind: store.AuditAuthRateLimited, Actor: actor, Source: src,
				Detail: what + ": too many failed authentications; further failures refused for a while"})
		}
		return s.failures.retryAfter(src, now), true
	}
	s.authFailLog.Log("authentication failed", attrs...)
	s.record(ctx, store.AuditEvent{At: now, Kind: store.AuditAuthFailed, Actor: actor, Source: src, Detail: detail})
	return 0, false
}

// allow refuses, with PermissionDenied, a caller whose API key may not use
// account (its scope names other accounts), and audits the refusal.
func (s *Server) allow(ctx context.Context, account, method string) error {
	c := callerOf(ctx)
	if c == nil || len(c.accounts) == 0 || slices.Contains(c.accounts, account) {
		return nil
	}
	s.refusalMetrics.AuthDenied()
	s.deniedLog.Log("API key used outside its accounts", "api_key", c.id, "account", account, "method", method, "peer", sourceOf(ctx))
	e := s.event(ctx, store.AuditAuthDenied, method+": the API key may not use this account")
	e.Account = account
	s.record(ctx, e)
	return status.Errorf(codes.PermissionDenied, "API key %s may not use account %q (it may use %s)", c.id, account, strings.Join(c.accounts, ", "))
}

// internal logs err and returns a generic Internal status: details stay in
// the log. A database out of disk space is no secret and is the operator's
// to mend, so it gets ResourceExhausted (gRPC's code for a full file
// system), says so, and names it in a google.rpc.ErrorInfo
// (grpcwire.ReasonStorageFull; no RetryInfo: no one knows when space comes
// back). A damaged database gets DataLoss, and a line within a bound
// saying what to do (Options.Repair). A database that cannot be reached (PostgreSQL
// restarting) gets Unavailable, which callers retry. A store call that
// failed because the call's own context ended is no error of the
// automator's: the caller gets its context's status, and the log a debug
// line.
func (s *Server) internal(ctx context.Context, doing string, err error) error {
	attrs := append(callAttrs(ctx), "doing", doing, "err", err)
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		// The caller left (a proxy stopping, a caller giving up) while
		// the store worked for it: nothing went wrong here.
		s.log.Debug("call ended while the store worked for it", attrs...)
		return status.FromContextError(ctx.Err()).Err()
	}
	s.storeFailed(err)
	if store.IsStorageFull(err) {
		s.diskFullLog.Log("the database is out of disk space: writes fail until space is freed", attrs...)
		st := status.Newf(codes.ResourceExhausted, "the automator's database is out of disk space while %s: nothing was stored; retry once space is freed", doing)
		if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: grpcwire.ReasonStorageFull, Domain: grpcwire.ErrorDomain}); err == nil {
			st = d
		}
		return st.Err()
	}
	if store.IsDamaged(err) {
		// It fails again until the operator repairs the database: not
		// Unavailable, which callers retry at once, but DataLoss, gRPC's
		// code for data that is damaged.
		s.damaged(doing, append(callAttrs(ctx), "err", err)...)
		return status.Errorf(codes.DataLoss, "the automator's database is damaged: %s failed, and fails until its operator repairs the database", doing)
	}
	if store.IsUnavailable(err) {
		// PostgreSQL restarting, failing over or out of reach: the call can
		// be made again, here or on another replica, once it is back.
		s.databaseUnreachable(attrs...)
		return status.Errorf(codes.Unavailable, "the automator's database is unreachable while %s; retry", doing)
	}
	if store.IsLocked(err) {
		// Another program holds the SQLite file's lock: every call that
		// writes waits for it, then fails, until it lets go (a review:
		// an internal error, logged per call).
		s.lockedLog.Log(lockedHelp, attrs...)
		return status.Errorf(codes.Unavailable, "the automator's database is locked by another program while %s: nothing was stored; retry once it lets go", doing)
	}
	s.internalLog.Log("internal error", attrs...)
	return status.Errorf(codes.Internal, "internal error while %s", doing)
}

// lockedHelp is what the log says of a store call that failed because
// another program held the SQLite database locked.
const lockedHelp = "the database is locked by another program: calls that write wait 5 s for it, then fail, until it lets go; look for a process that holds the database file open in a transaction (a sqlite3 shell, a script: `automator backup` is the way to copy it while serve runs)"

// callAttrs names, for a log line, the call of ctx (when it is one) and
// who made it: the account whose proxy called, or the caller's API key.
func callAttrs(ctx context.Context) []any {
	var attrs []any
	if m, ok := grpc.Method(ctx); ok {
		attrs = append(attrs, "method", methodName(m))
	}
	if a := accountFrom(ctx); a != "" {
		attrs = append(attrs, "account", a)
	}
	if c := callerFrom(ctx); c != "" {
		attrs = append(attrs, "caller", c)
	}
	return attrs
}

// profileTrailer says how the token of a proxy call stands: the account's
// current key id, for a previous token the end of its overlap, and the
// key check of each of the account's keys. All are the token holder's own
// account's. A proxy whose profile holds no key of that id, or whose token
// ends, predates a rotation; one that holds a key of one of those ids
// whose check differs is refused at its polls. The checks are left out
// when the account's keys cannot be read.
func (s *Server) profileTrailer(ctx context.Context) metadata.MD {
	t := tokenFrom(ctx)
	md := metadata.Pairs(grpcwire.TrailerKeyID, strconv.FormatUint(uint64(t.keyID), 10))
	if !t.until.IsZero() {
		md.Set(grpcwire.TrailerTokenUntil, t.until.UTC().Format(time.RFC3339Nano))
	}
	if r, err := s.ringWith(ctx, accountFrom(ctx), t.keyID); err == nil {
		for i, k := range r.opened {
			md.Append(grpcwire.TrailerKeyCheck, strconv.FormatUint(uint64(k.ID), 10)+":"+base64.RawStdEncoding.EncodeToString(r.checks[i]))
		}
	}
	return md
}
