package cli

import (
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

// readyz answers 200 while the store answers and its migrations are done,
// 503 otherwise or once the automator is shutting down (its calls answer
// UNAVAILABLE then), so a load balancer sends no caller to a replica that
// cannot serve. The answer needs no key, so it says only which of the two
// it is: the store's error names the database (its host, user, file path)
// and goes to the log instead, where `automator status`'s answer points.
// It logs when the store stops answering, when the kind of reason changes
// while it does not (the database reachable again but its schema behind,
// say), and when it answers again, not at every check: load balancers
// check every second or more often, and a store out of reach may fail
// with another text at each (a connect timeout, then a refused
// connection). So the log's last "not ready" gives the current kind of
// reason.
func readyz(st pinger, stopping func() bool, log *slog.Logger) http.Handler {
	var mu sync.Mutex
	notReady := false
	var kind readyzKind // of the last "not ready" logged
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if stopping() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready: shutting down")
			return
		}
		err := st.Ping(ctx)
		if err != nil && r.Context().Err() != nil {
			// The check's caller gave up (its timeout) before the store
			// answered: that says nothing of the store. (The store taking
			// longer than our own bound does: ctx's deadline.)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		mu.Lock()
		switch {
		case err != nil && (!notReady || kindOf(err) != kind):
			log.Warn("not ready", "err", err)
			kind = kindOf(err)
		case err == nil && notReady:
			log.Info("ready again")
		}
		notReady = err != nil
		mu.Unlock()
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, readyzStoreDown)
			return
		}
		fmt.Fprintln(w, "ready")
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
func operatorHandlers(mux *http.ServeMux, st store.Store, m *metrics.Metrics, srv *server.Server, master crypto.MasterKey, dir string, cfg config.Config, db string, log *slog.Logger) (*dashboard.Dashboard, error) {
	dash, err := dashboard.New(dashboard.Options{
		Store:      st,
		Opener:     srv,
		SignIns:    srv,
		MasterKey:  master,
		PollWindow: cfg.PollWindow,
		PublicURL:  cfg.PublicURL,
		DB:         dashboardDB(dir, cfg, db),
		RevealKeys: cfg.DashboardRevealKeys,
		Logger:     log,
	})
	if err != nil {
		return nil, err
	}
	mux.Handle("GET /readyz", readyz(st, srv.ShuttingDown, log))
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
