// Package dashboard is the automator's web dashboard, served on its HTTP
// listener under /dashboard/: accounts with their queues (and a warning
// for stranded work), the instances of an account, and units of work with
// their timelines. Pages are server-rendered html/template with embedded
// assets (no CDN); each page keeps itself current over server-sent events.
//
// Operators sign in with an admin API key. The session is a cookie signed
// with a key derived from the master key, so any automator replica serves
// any page (no sticky sessions), and every request checks the API key
// again, so a revoked key loses the dashboard at once. Sign-out records the
// session's random id in the store, which every request checks too, so a
// copy of the cookie is refused by every replica from then on.
//
// Script names, arguments and output are sealed with the account key in the
// store; the dashboard opens them only for keys the operator allows
// (Options.RevealKeys), and shows everyone else that they are hidden.
package dashboard

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/printable"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// Prefix is where the dashboard lives on the HTTP listener.
const Prefix = "/dashboard/"

// Store is what the dashboard reads.
type Store interface {
	AccountStats(ctx context.Context, p store.AccountStatsParams) ([]store.AccountStats, error)
	AccountList(ctx context.Context) ([]store.Account, error)
	AccountsBeingDeleted(ctx context.Context) ([]store.AccountDeletion, error)
	InstanceList(ctx context.Context, account string) ([]store.Instance, error)
	WorkList(ctx context.Context, p store.WorkListParams) ([]store.Work, error)
	WorkGet(ctx context.Context, id string) (store.Work, error)
	APIKeyGetByHash(ctx context.Context, h []byte) (store.APIKey, error)
	DashboardSessionEnd(ctx context.Context, p store.DashboardSessionEndParams) error
	DashboardSessionEnded(ctx context.Context, id string) (bool, error)
	DashboardSessionPurge(ctx context.Context, p store.DashboardSessionPurgeParams) (int, error)
}

// Opener opens sealed commands and results (the server does, with the
// account keys). ListedOutcome and ListedScript open only what a listing
// shows, and keep it (server.Server.ListedOutcome); ListedKnown tells
// whether they would read the unit again.
type Opener interface {
	OpenCommand(ctx context.Context, w store.Work) (*automatorv1.Command, error)
	OpenResult(ctx context.Context, w store.Work) (*automatorv1.Result, error)
	ListedOutcome(ctx context.Context, w store.Work) (*server.Outcome, error)
	ListedScript(ctx context.Context, w store.Work) (string, error)
	ListedKnown(w store.Work, script bool) bool
}

// SignIns records sign-ins and sign-outs in the audit log (server.Server
// does). SignInFailed is told of a refused one; limited: the address has
// spent its budget of failures; refuse until retry has passed. SignedIn
// writes the record of a sign-in before its session is issued: an error
// refuses the sign-in. SignOutEvent is the record of a sign-out, written
// with it (store.DashboardSessionEndParams.Audit).
type SignIns interface {
	SignInFailed(ctx context.Context, source, why string) (retry time.Duration, limited bool)
	SignInDenied(ctx context.Context, source, keyID, why string)
	SignedIn(ctx context.Context, source, keyID string) error
	SignOutEvent(source, keyID string) store.AuditEvent
}

// Options configure New.
type Options struct {
	Store  Store
	Opener Opener
	// MasterKey derives the key that signs sessions: every replica with
	// the same master key accepts every other's sessions.
	MasterKey crypto.MasterKey
	// PollWindow is the automator's poll window: an instance that has not
	// polled within server.InstanceOnlineWithin of it is offline.
	PollWindow time.Duration
	// SignIns, when set, records each sign-in and sign-out in the audit
	// log (the server), neither made unless its record is written, and is
	// told of each sign-in refused for a wrong or revoked
	// API key (audited, and counted against the address's budget of failed
	// authentications, as a refused call is), and of each refused for a
	// key that may not sign in (audited, as a call outside its key's scope
	// is).
	SignIns SignIns
	// PublicURL is the automator's public_url. A form posted from its
	// origin (scheme, host and port) is accepted as well as one from the
	// origin of the request's Host, for a reverse proxy that serves the
	// dashboard there and rewrites Host. Optional.
	PublicURL string
	// DB is the --db the automator's serve was given, as one word of a
	// shell's command line and without a password ("" when serve was given
	// none): the CLI commands the pages name, which open the database,
	// must be given it, or they act on the database automator.yaml names
	// (and are refused while serve runs on another). The pages of a
	// signed-in operator name it; the sign-in form, shown to anyone, names
	// no path or host: it says to give serve's --db.
	DB string
	// RevealKeys are the ids of the API keys that may see script names,
	// arguments and output. None may by default.
	RevealKeys []string
	// SessionTTL is how long a sign-in lasts (12 hours).
	SessionTTL time.Duration
	// Refresh is how often a live page reads the store again (2 s).
	Refresh time.Duration
	// Keepalive is how often an idle event stream sends a comment, so
	// proxies and load balancers keep it open (15 s; keep it under 20 s).
	Keepalive time.Duration
	// WriteTimeout is how long one write to an event stream may take
	// (10 s): a client that stopped reading, whose socket buffers are
	// full, is dropped then and its stream ends.
	WriteTimeout time.Duration
	// PageSize is the number of units on a page of work (50).
	PageSize int
	// AccountsPageSize is the number of accounts on a page of the accounts
	// table (100): a live page is rendered and sent again at every refresh
	// that changes it (a poll, a second of an age shown), some 370 bytes
	// an account. The warnings above it name every account they concern,
	// on every page.
	AccountsPageSize int
	// InstancesPageSize is the number of instances on a page of an
	// account's instances (100), each some 700 bytes.
	InstancesPageSize int
	// MaxLiveStreamsPerKey bounds the live pages (event streams) one API
	// key's sessions hold open on this replica at once (64): each reads
	// the store every Refresh, so one key could otherwise hold a replica
	// busy with as many as http_max_connections allows. A page past it
	// stays as it was loaded, and says so (dashboard_live_pages_per_key).
	MaxLiveStreamsPerKey int
	// Now tells the time (time.Now).
	Now    func() time.Time
	Logger *slog.Logger
}

// Dashboard serves the pages. Mount its Handler at Prefix.
type Dashboard struct {
	o          Options
	sessionKey []byte
	reveal     map[string]bool
	// publicOrigin is PublicURL's origin ("" without one).
	publicOrigin string
	pages        map[string]*template.Template
	static       http.Handler
	log          *slog.Logger

	stopOnce sync.Once
	stop     chan struct{} // closed by Close: event streams end
	// streamsEnded counts the event streams whose handler returned (tests
	// wait on it).
	streamsEnded counter
	liveMu       sync.Mutex
	live         map[string]int // open event streams by API key id
	deadlineOnce sync.Once      // warns once that writes take no deadline
}

//go:embed templates static
var assets embed.FS

// New builds a dashboard.
func New(o Options) (*Dashboard, error) {
	if o.Store == nil || o.Opener == nil {
		return nil, errors.New("dashboard: Store and Opener are required")
	}
	if o.PollWindow <= 0 {
		return nil, errors.New("dashboard: PollWindow is required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.SessionTTL, 12*time.Hour)
	def(&o.Refresh, 2*time.Second)
	def(&o.Keepalive, 15*time.Second)
	def(&o.WriteTimeout, 10*time.Second)
	if o.PageSize <= 0 {
		o.PageSize = 50
	}
	if o.AccountsPageSize <= 0 {
		o.AccountsPageSize = 100
	}
	if o.InstancesPageSize <= 0 {
		o.InstancesPageSize = 100
	}
	if o.MaxLiveStreamsPerKey <= 0 {
		o.MaxLiveStreamsPerKey = 64
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	key, err := sessionKey(o.MasterKey)
	if err != nil {
		return nil, err
	}
	d := &Dashboard{
		o:          o,
		sessionKey: key,
		reveal:     make(map[string]bool),
		pages:      make(map[string]*template.Template),
		log:        o.Logger,
		stop:       make(chan struct{}),
		live:       make(map[string]int),
	}
	if o.PublicURL != "" {
		u, err := url.Parse(o.PublicURL)
		if err != nil || u.Scheme == "" || u.Host == "" {
			return nil, fmt.Errorf("dashboard: PublicURL %q is not an absolute URL", o.PublicURL)
		}
		d.publicOrigin = origin(u)
	}
	for _, id := range o.RevealKeys {
		d.reveal[id] = true
	}
	for _, name := range []string{"login", "accounts", "instances", "work", "unit", "error"} {
		t, err := template.New(name).Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, err
		}
		d.pages[name] = t
	}
	staticFS, err := fs.Sub(assets, "static")
	if err != nil {
		return nil, err
	}
	d.static = staticFiles(staticFS)
	return d, nil
}

// purgeMargin is how long after a session expired its sign-out's record is
// kept: a replica whose clock is behind the purging one's still accepts
// the session until its own clock says it expired.
const purgeMargin = time.Hour

// PurgeEndedSessions deletes the records of sign-outs whose sessions have
// expired (more than an hour ago: clocks of replicas differ), and returns
// how many it deleted. serve runs it every hour.
func (d *Dashboard) PurgeEndedSessions(ctx context.Context) (int, error) {
	return d.o.Store.DashboardSessionPurge(ctx, store.DashboardSessionPurgeParams{ExpiredBefore: d.o.Now().Add(-purgeMargin)})
}

// Close ends the open event streams (call it when the HTTP server shuts
// down: http.Server.RegisterOnShutdown).
func (d *Dashboard) Close() { d.stopOnce.Do(func() { close(d.stop) }) }

// Handler serves every page under Prefix.
func (d *Dashboard) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Prefix+"login", d.loginForm)
	mux.HandleFunc("POST "+Prefix+"login", d.login)
	mux.HandleFunc("POST "+Prefix+"logout", d.logout)
	// Its files only: the folder itself is no page (a file server would
	// list it).
	mux.Handle("GET "+Prefix+"static/{file}", d.static)
	mux.Handle("GET "+Prefix+"{$}", d.page("accounts", "accounts", d.accounts))
	mux.Handle("GET "+Prefix+"accounts/{account}", d.page("instances", "accounts", d.instances))
	mux.Handle("GET "+Prefix+"work", d.page("work", "work", d.workList))
	mux.Handle("GET "+Prefix+"work/{id}", d.page("unit", "work", d.unit))
	notFound := d.page("error", "", func(*http.Request, *session) (string, any, error) {
		return "", nil, errNotFound("no such page")
	})
	mux.Handle(Prefix, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if allow := allowedMethods(mux, r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			d.render(w, r, http.StatusMethodNotAllowed, "error", http.StatusText(http.StatusMethodNotAllowed), "", nil,
				fmt.Sprintf("%s is not allowed on %s: it takes %s only.", printable.Token(r.Method), printable.Quote(r.URL.Path), strings.Join(allow, " or ")))
			return
		}
		notFound.ServeHTTP(w, r)
	}))
	return securityHeaders(mux)
}

// allowedMethods lists the methods that a page other than the catch-all
// serves at r's path: a known page asked for with another method (a GET of
// the sign-out, a POST of a listing) is 405 naming them, not "no such
// page", which its catch-all would otherwise answer.
func allowedMethods(mux *http.ServeMux, r *http.Request) []string {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		if m == r.Method || (m == http.MethodGet && r.Method == http.MethodHead) {
			continue
		}
		other := r.Clone(r.Context())
		other.Method = m
		if _, pattern := mux.Handler(other); pattern != "" && pattern != Prefix {
			allow = append(allow, m)
			if m == http.MethodGet {
				// Served wherever GET is (net/http's patterns), as the
				// API's Allow says too.
				allow = append(allow, http.MethodHead)
			}
		}
	}
	return allow
}

// securityHeaders: the pages load nothing from elsewhere, run no inline
// script and are never framed.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "same-origin")
		h.ServeHTTP(w, r)
	})
}

// onlineSince is the earliest last poll of an online instance, now.
func (d *Dashboard) onlineSince(now time.Time) time.Time {
	return now.Add(-server.InstanceOnlineWithin(d.o.PollWindow))
}

// revealKeys lists the allowed key ids, for the page that says who may.
func (d *Dashboard) revealKeys() []string {
	out := make([]string, 0, len(d.reveal))
	for id := range d.reveal {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// staticFiles serves the files of fsys by their names, and nothing else:
// no folder is listed, whatever the path's escapes decode to ("./",
// "live.js/"), and a name that is not one of its files is not found.
func staticFiles(fsys fs.FS) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("file")
		if !fs.ValidPath(name) || strings.Contains(name, "/") {
			http.NotFound(w, r)
			return
		}
		if fi, err := fs.Stat(fsys, name); err != nil || !fi.Mode().IsRegular() {
			http.NotFound(w, r)
			return
		}
		http.ServeFileFS(w, r, fsys, name)
	})
}
