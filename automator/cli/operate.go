package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/dashboard"
	"github.com/opsgate/opsgate/automator/metrics"
	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/pgstore"
	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/proxy/service"
)

// newLogger logs to w as text, or as one JSON object per line when format
// is "json" (log collectors): the proxy's logger, so both programs' lines
// read alike.
var newLogger = service.NewLogger

// pinger is the store check behind /readyz.
type pinger interface {
	Ping(ctx context.Context) error
}

// readiness is whether the automator can serve calls: while its store
// answers and its migrations are done, and until it is shutting down (its
// calls answer UNAVAILABLE then). /readyz and the gRPC health service ask
// it, so that a load balancer sends no caller to a replica that cannot
// serve, whichever of the two it checks. It logs when the store stops
// answering, when the kind of reason changes while it does not (the
// database reachable again but its schema behind, say), and when it
// answers again, not at every check: load balancers check every second or
// more often, and a store out of reach may fail with another text at each
// (a connect timeout, then a refused connection). So the log's last "not
// ready" gives the current kind of reason. The answers need no key, so
// they say only which of the two it is: the store's error names the
// database (its host, user, file path) and goes to the log instead, where
// `automator status`'s answer points.
type readiness struct {
	st       pinger
	stopping func() bool
	log      *slog.Logger

	mu       sync.Mutex
	notReady bool
	kind     readyzKind // of the last "not ready" logged
}

func newReadiness(st pinger, stopping func() bool, log *slog.Logger) *readiness {
	return &readiness{st: st, stopping: stopping, log: log}
}

// errShuttingDown is check's answer once the automator is shutting down.
var errShuttingDown = errors.New("shutting down")

// check returns nil when the automator is ready, errShuttingDown, the
// store's error, or ctx's when ctx ended before the store answered: the
// caller gave up, which says nothing of the store and changes nothing.
// The store is given until ctx's deadline and at most bound.
func (r *readiness) check(ctx context.Context, bound time.Duration) error {
	if r.stopping() {
		return errShuttingDown
	}
	pctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	err := r.st.Ping(pctx)
	if err != nil && ctx.Err() != nil {
		// The check's caller gave up (its timeout) before the store
		// answered: that says nothing of the store. (The store taking
		// longer than our own bound does.)
		return ctx.Err()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err != nil && (!r.notReady || kindOf(err) != r.kind):
		r.log.Warn("not ready", "err", err)
		r.kind = kindOf(err)
	case err == nil && r.notReady:
		r.log.Info("ready again")
	}
	r.notReady = err != nil
	return err
}

// healthz answers 200 while the process serves gRPC, from before its HTTP
// listener opens until it begins to shut down, and 503 once it does: its
// gRPC listener is closed at once then, and a check that took the 200 for
// a served port would be wrong for up to the 5 s the calls still open are
// given to end.
func healthz(stopping func() bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if stopping() {
			http.Error(w, "shutting down: gRPC is no longer served", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
}

// readyz answers 200 while the automator is ready, 503 otherwise, saying
// only whether it is shutting down or its store check failed.
func readyz(st pinger, stopping func() bool, log *slog.Logger) http.Handler {
	return newReadiness(st, stopping, log).handler()
}

// readyzBound bounds /readyz's store check.
const readyzBound = 2 * time.Second

func (r *readiness) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		switch err := r.check(req.Context(), readyzBound); {
		case err == nil:
			fmt.Fprintln(w, "ready")
		case errors.Is(err, errShuttingDown):
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready: shutting down")
		case req.Context().Err() != nil:
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, readyzStoreDown)
		}
	})
}

// readyzKind is a kind of reason for /readyz to fail, the two its answer
// names: the store does not answer, or its schema is behind.
type readyzKind int

const (
	storeDown readyzKind = iota
	schemaBehind
)

func kindOf(err error) readyzKind {
	if _, ok := errors.AsType[*store.SchemaBehindError](err); ok {
		return schemaBehind
	}
	return storeDown
}

// readyzStoreDown is /readyz's answer while the store check fails.
const readyzStoreDown = "not ready: the store does not answer or its schema is behind; serve's log says why"

// operatorHandlers mounts what operators use on the HTTP listener beside
// /healthz and the API: /readyz, /metrics and the dashboard (with / sending
// a browser to it). It returns the dashboard: call its Close when the HTTP
// server shuts down (it ends the open event streams). db is serve's --db
// ("" without one), which the CLI commands the dashboard names are given.
func operatorHandlers(mux *http.ServeMux, st store.Store, ready *readiness, m *metrics.Metrics, srv *server.Server, master crypto.MasterKey, dir string, cfg config.Config, db string, log *slog.Logger) (*dashboard.Dashboard, error) {
	dash, err := dashboard.New(dashboard.Options{
		Store:                st,
		Opener:               srv,
		SignIns:              srv,
		MasterKey:            master,
		PollWindow:           cfg.PollWindow,
		PublicURL:            cfg.PublicURL,
		DB:                   dashboardDB(dir, cfg, db),
		RevealKeys:           cfg.DashboardRevealKeys,
		MaxLiveStreamsPerKey: cmp.Or(cfg.DashboardLivePagesPerKey, config.DefaultDashboardLivePagesPerKey),
		Logger:               log,
	})
	if err != nil {
		return nil, err
	}
	mux.Handle("GET /readyz", ready.handler())
	mux.Handle("GET /metrics", m.Handler())
	mux.Handle(dashboard.Prefix, dash.Handler())
	mux.Handle("GET /{$}", http.RedirectHandler(dashboard.Prefix, http.StatusSeeOther))
	return dash, nil
}

// dashboardDB is the --db serve was given (db, "" for none) as the
// dashboard names it in the CLI commands it prints, to be run as printed on
// the automator's host: one shell word, a SQLite file by its absolute path,
// a PostgreSQL URL without its password or sslpassword (the dashboard is
// no place for them; the command then takes them from PGPASSWORD or
// PGSSLPASSWORD, or says it needs one).
func dashboardDB(dir string, cfg config.Config, db string) string {
	if db == "" {
		return ""
	}
	if !pgstore.IsDSN(db) {
		return shellArg(servedDB(dir, cfg))
	}
	u, err := url.Parse(db)
	if err != nil {
		return "DSN" // IsDSN parsed it
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.User(u.User.Username())
	}
	if q := u.Query(); q.Has("password") || q.Has("sslpassword") {
		q.Del("password")
		q.Del("sslpassword")
		u.RawQuery = q.Encode()
	}
	return shellArg(u.String())
}
