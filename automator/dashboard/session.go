package dashboard

import (
	"context"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
)

const (
	cookieName = "opsgate_dashboard"
	// maxLoginBody bounds the sign-in form.
	maxLoginBody = 4 << 10
)

// session is what the signed cookie carries: its random id (what a
// sign-out records), which API key signed in (its id and the SHA-256 of its
// secret, never the secret) and until when.
type session struct {
	ID      string `json:"i"`
	KeyID   string `json:"k"`
	Hash    string `json:"h"`
	Expires int64  `json:"e"` // unix seconds
	// Reveal is set after the check: the key may see commands and output.
	Reveal bool `json:"-"`
}

// sessionKey derives the cookie-signing key from the master key, for this
// purpose only.
func sessionKey(m crypto.MasterKey) ([]byte, error) {
	k, err := hkdf.Key(sha256.New, m[:], nil, "opsgate automator dashboard session v1", 32)
	if err != nil {
		return nil, fmt.Errorf("deriving the dashboard's session key: %w", err)
	}
	return k, nil
}

var b64 = base64.RawURLEncoding

func (d *Dashboard) mac(payload []byte) []byte {
	m := hmac.New(sha256.New, d.sessionKey)
	m.Write(payload)
	return m.Sum(nil)
}

// encode signs s into a cookie value: payload "." HMAC, both base64url.
func (d *Dashboard) encode(s session) string {
	payload, _ := json.Marshal(s)
	return b64.EncodeToString(payload) + "." + b64.EncodeToString(d.mac(payload))
}

// decode returns the session a cookie value carries if its signature holds
// and it has not expired; an expired one is returned with an endedErr.
func (d *Dashboard) decode(v string, now time.Time) (session, error) {
	p, m, ok := strings.Cut(v, ".")
	if !ok {
		return session{}, errors.New("malformed session cookie")
	}
	payload, err1 := b64.DecodeString(p)
	sig, err2 := b64.DecodeString(m)
	if err1 != nil || err2 != nil || !hmac.Equal(sig, d.mac(payload)) {
		return session{}, errors.New("session cookie signature does not hold")
	}
	var s session
	if err := json.Unmarshal(payload, &s); err != nil {
		return session{}, errors.New("malformed session cookie")
	}
	if s.ID == "" {
		// Made before sessions had ids: it could not be signed out of.
		return session{}, errors.New("session cookie without an id")
	}
	if now.Unix() >= s.Expires {
		return s, endedErr("it expired")
	}
	return s, nil
}

// endedErr is why a session whose cookie holds has ended, in words its
// holder may be shown on the sign-in form (never a store's error).
type endedErr string

func (e endedErr) Error() string { return string(e) }

// The ends of a session whose API key may still sign in: the sign-in form
// asks for it again, rather than telling how to make a new admin key, as
// for a key revoked (a review: a copy of a signed-out cookie was told so).
const (
	sessionExpired   endedErr = "it expired"
	sessionSignedOut endedErr = "it was signed out of"
)

// newSessionID returns a random session id, 128 bits in base64url.
func newSessionID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("making a session id: %w", err)
	}
	return b64.EncodeToString(b), nil
}

// checkKey returns why the API key k may not use the dashboard, or nil.
func checkKey(k store.APIKey) error {
	switch {
	case !k.RevokedAt.IsZero():
		return errors.New("this API key was revoked")
	case len(k.Accounts) > 0:
		return fmt.Errorf("this API key may use accounts %s only; the dashboard needs an admin key (one for every account)", strings.Join(k.Accounts, ", "))
	}
	return nil
}

// authenticate returns the request's session after checking it in the
// store again: a session signed out of on any replica, or whose API key
// was revoked or deleted, ends at once.
func (d *Dashboard) authenticate(ctx context.Context, r *http.Request) (*session, error) {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return nil, errors.New("not signed in")
	}
	s, err := d.decode(c.Value, d.o.Now())
	if err != nil {
		return nil, err
	}
	if err := d.recheck(ctx, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// recheck checks a session against the store, at every request and at
// every refresh of an event stream: it has not expired (a stream outlives
// its request), nobody signed out of it (one primary-key read), and its API
// key may still use the dashboard.
func (d *Dashboard) recheck(ctx context.Context, s *session) error {
	if d.o.Now().Unix() >= s.Expires {
		return sessionExpired
	}
	ended, err := d.o.Store.DashboardSessionEnded(ctx, s.ID)
	if err != nil {
		return fmt.Errorf("checking for a sign-out of the session: %w", err)
	}
	if ended {
		return sessionSignedOut
	}
	h, err := hex.DecodeString(s.Hash)
	if err != nil {
		return errors.New("malformed session cookie")
	}
	k, err := d.o.Store.APIKeyGetByHash(ctx, h)
	if errors.Is(err, store.ErrNotFound) || (err == nil && k.ID != s.KeyID) {
		return endedErr("its API key no longer exists")
	}
	if err != nil {
		return fmt.Errorf("checking the session's API key: %w", err)
	}
	if err := checkKey(k); err != nil {
		return endedErr(err.Error())
	}
	s.Reveal = d.reveal[k.ID]
	return nil
}

// loginForm shows the sign-in form. A visitor whose session just ended
// (its API key revoked, say: pages send it here) is told why, with the
// help the refused sign-in gives: its cookie, signed by this automator,
// shows it was signed in, so this tells it nothing it did not know.
func (d *Dashboard) loginForm(w http.ResponseWriter, r *http.Request) {
	data := loginData{Next: safeNext(r.URL.Query().Get("next"))}
	if c, err := r.Cookie(cookieName); err == nil {
		s, err := d.decode(c.Value, d.o.Now())
		if err == nil {
			err = d.recheck(r.Context(), &s)
		}
		var ended endedErr
		switch {
		case errors.As(err, &ended) && (ended == sessionExpired || ended == sessionSignedOut):
			data.Error = "Your session ended: " + ended.Error() + ". Sign in again with your API key."
		case errors.As(err, &ended):
			data.Error = "Your session ended: " + ended.Error() + ". " + d.newAdminKeyHelp()
		}
	}
	d.render(w, r, http.StatusOK, "login", "Sign in", "", nil, data)
}

type loginData struct {
	Next  string
	Error string
}

// newAdminKeyHelp ends the refusal of a wrong or a revoked key: how an
// operator makes a new admin key, as the CLI says of a revoked
// admin.apikey. It is the same for both and names no key, path or host (a
// visitor is not signed in), so it tells nobody which keys exist: a serve
// given --db gets the --db DSN its command needs, DSN said to be serve's,
// not the database itself. That a key was revoked is said only to whoever
// holds its 256-bit secret, as the gRPC and HTTP APIs already tell a call
// made with it.
func (d *Dashboard) newAdminKeyHelp() string {
	if d.o.DB == "" {
		return "To make a new admin key, run automator apikey create admin --all-accounts --data-dir DIR on the automator's host, DIR being its data directory (there it needs no API key)."
	}
	return "To make a new admin key, run automator apikey create admin --all-accounts --data-dir DIR --db DSN on the automator's host, DIR being its data directory and DSN the --db its serve was given (there it needs no API key)."
}

// login checks the API key of the form and sets the session cookie.
func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	if !d.sameOrigin(r) {
		http.Error(w, "cross-origin sign-in refused", http.StatusForbidden)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad sign-in form", http.StatusBadRequest)
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	secret := strings.TrimSpace(r.PostForm.Get("api_key"))
	// The form needs no credential to be posted: a refusal writes no log
	// line of its own, or each post would. A wrong or revoked key is a
	// failed authentication, which SignIns logs (a bounded number of
	// lines) and audits; an empty form is the visitor's own mistake.
	fail := func(code int, why string) {
		d.log.Debug("dashboard sign-in refused", "peer", r.RemoteAddr, "reason", why)
		d.render(w, r, code, "login", "Sign in", "", nil, loginData{Next: next, Error: why})
	}
	if secret == "" {
		fail(http.StatusBadRequest, "Enter an API key.")
		return
	}
	// A wrong or revoked key is a failed authentication, counted against
	// the address as a refused call is: past its budget, refused as such.
	// The log and the audit record get the reason; the page adds how to
	// make a new admin key.
	refused := func(code int, why string) {
		if d.o.SignIns == nil {
			d.log.Warn("dashboard sign-in refused", "peer", r.RemoteAddr, "reason", why)
		} else if retry, limited := d.o.SignIns.SignInFailed(r.Context(), remoteHost(r), why); limited {
			// As the API's 429 of the same budget: whole seconds, rounded up.
			w.Header().Set("Retry-After", strconv.FormatInt(int64((max(retry, time.Second)+time.Second-1)/time.Second), 10))
			fail(http.StatusTooManyRequests, fmt.Sprintf("Too many failed sign-ins from your address; try again in %v.", retry.Round(time.Second)))
			return
		}
		fail(code, why+" "+d.newAdminKeyHelp())
	}
	h := crypto.HashToken(secret)
	k, err := d.o.Store.APIKeyGetByHash(r.Context(), h)
	if errors.Is(err, store.ErrNotFound) {
		refused(http.StatusUnauthorized, "That is not a valid API key.")
		return
	}
	if err != nil {
		d.log.Error("dashboard sign-in: reading the API key", "err", err)
		fail(http.StatusServiceUnavailable, "The store did not answer; try again.")
		return
	}
	if err := checkKey(k); err != nil {
		if !k.RevokedAt.IsZero() {
			refused(http.StatusForbidden, capitalise(err.Error())+".")
			return
		}
		// A valid key that may not sign in (a scoped one): its holder's.
		if d.o.SignIns == nil {
			d.log.Warn("dashboard sign-in refused", "peer", r.RemoteAddr, "api_key", k.ID, "reason", err.Error())
		} else {
			d.o.SignIns.SignInDenied(r.Context(), remoteHost(r), k.ID, err.Error())
		}
		fail(http.StatusForbidden, capitalise(err.Error())+".")
		return
	}
	id, err := newSessionID()
	if err != nil {
		d.log.Error("dashboard sign-in", "err", err)
		fail(http.StatusInternalServerError, "The automator could not make a session; see its log.")
		return
	}
	// The record of the sign-in is written before its session is issued:
	// a sign-in the audit log does not hold is not made.
	if d.o.SignIns != nil {
		if err := d.o.SignIns.SignedIn(r.Context(), remoteHost(r), k.ID); err != nil {
			d.log.Error("dashboard sign-in: writing it to the audit log", "api_key", k.ID, "peer", r.RemoteAddr, "err", err)
			if store.IsStorageFull(err) {
				// Trying again would not help until space is freed.
				fail(http.StatusInsufficientStorage, "The automator's database is out of disk space, so the audit log cannot take the record of this sign-in and you are not signed in; sign in once its operator has freed space.")
				return
			}
			fail(http.StatusServiceUnavailable, "The audit log did not take the record of this sign-in, so you are not signed in; try again.")
			return
		}
	}
	now := d.o.Now()
	s := session{ID: id, KeyID: k.ID, Hash: hex.EncodeToString(h), Expires: now.Add(d.o.SessionTTL).Unix()}
	http.SetCookie(w, &http.Cookie{
		Name:     cookieName,
		Value:    d.encode(s),
		Path:     Prefix,
		MaxAge:   int(d.o.SessionTTL / time.Second),
		HttpOnly: true,
		Secure:   secureRequest(r),
		SameSite: http.SameSiteStrictMode,
	})
	d.log.Info("dashboard sign-in", "api_key", k.ID, "peer", r.RemoteAddr)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout ends the session for good: its id is recorded in the store, with
// the sign-out's audit record in the same write, so every replica sharing
// it refuses the cookie from then on, a copy of it included, and the
// browser's cookie is cleared. If the store does not answer or cannot
// write the audit record, nothing is ended or cleared: the visitor is told
// and may sign out again.
func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request) {
	if !d.sameOrigin(r) {
		http.Error(w, "cross-origin sign-out refused", http.StatusForbidden)
		return
	}
	if c, err := r.Cookie(cookieName); err == nil {
		// A cookie that is forged or expired is no session to end.
		if s, err := d.decode(c.Value, d.o.Now()); err == nil {
			p := store.DashboardSessionEndParams{ID: s.ID, Expires: time.Unix(s.Expires, 0)}
			if d.o.SignIns != nil {
				e := d.o.SignIns.SignOutEvent(remoteHost(r), s.KeyID)
				p.Audit = &e
			}
			// The sign-out and its audit record are one write: either
			// both are made or neither, and the session stays valid.
			if err := d.o.Store.DashboardSessionEnd(r.Context(), p); err != nil {
				d.log.Error("dashboard sign-out: recording it", "api_key", s.KeyID, "peer", r.RemoteAddr, "err", err)
				d.render(w, r, http.StatusServiceUnavailable, "error", http.StatusText(http.StatusServiceUnavailable), "", nil,
					"The store did not record the sign-out (nor its audit record), so you are still signed in; sign out again.")
				return
			}
			d.log.Info("dashboard sign-out", "api_key", s.KeyID, "peer", r.RemoteAddr)
		}
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: Prefix, MaxAge: -1, HttpOnly: true,
		Secure: secureRequest(r), SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
}

// sameOrigin refuses a form posted from another site (the SameSite cookie
// already keeps the session out of such a request; this also covers the
// sign-in form, which has no session yet). The form's origin is the
// request's Host, or the public URL's origin: behind a reverse proxy that
// rewrites Host the browser's Origin names the proxy, not the automator.
func (d *Dashboard) sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" || o == "null" {
		return o == "" // no Origin: not a browser's cross-site form post
	}
	u, err := url.Parse(o)
	if err != nil {
		return false
	}
	return u.Host == r.Host || (d.publicOrigin != "" && origin(u) == d.publicOrigin)
}

// origin is the origin of u as a browser's Origin header writes it:
// scheme://host, with the port only when it is not the scheme's default.
func origin(u *url.URL) string {
	scheme, host, port := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname()), u.Port()
	if (scheme == "https" && port == "443") || (scheme == "http" && port == "80") {
		port = ""
	}
	if port != "" {
		host = net.JoinHostPort(host, port)
	} else if strings.Contains(host, ":") {
		host = "[" + host + "]" // IPv6
	}
	return scheme + "://" + host
}

// secureRequest reports whether the browser reached the dashboard over
// https, so that its session cookie is Secure (never sent over plain
// http). The listener serves plain HTTP, so that is through a
// TLS-terminating reverse proxy: one that says so in X-Forwarded-Proto,
// or one that does not (nginx sends it only when told to), which the
// browser's own Origin tells, as a form post carries it.
func secureRequest(r *http.Request) bool {
	if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		return true
	}
	u, err := url.Parse(r.Header.Get("Origin"))
	return err == nil && strings.EqualFold(u.Scheme, "https")
}

// safeNext keeps a post-sign-in redirect on the dashboard: a path under
// Prefix with no dot segment, percent-encoded or not (http.Redirect and
// browsers resolve them: /dashboard/../metrics lands on /metrics), and
// nothing a browser drops or reads as a slash (tab, newline, backslash).
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || strings.ContainsAny(next, "\\\t\r\n") {
		return Prefix
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.Opaque != "" || !strings.HasPrefix(u.Path, Prefix) {
		return Prefix
	}
	clean := path.Clean(u.Path)
	if strings.HasSuffix(u.Path, "/") {
		clean += "/"
	}
	if clean != u.Path {
		return Prefix
	}
	return next
}

func capitalise(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// remoteHost is the address a request came from, without its port.
func remoteHost(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}
