package dashboard

import (
	"bytes"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
)

// loader reads what a page shows. It returns the page title and data, or
// an error (an *httpError to answer with its code and message).
type loader func(r *http.Request, s *session) (title string, data any, err error)

// httpError is an error a visitor can act on, with its status code.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func errNotFound(msg string) error   { return &httpError{http.StatusNotFound, msg} }
func errBadRequest(msg string) error { return &httpError{http.StatusBadRequest, msg} }

// view is what the layout and every page template get.
type view struct {
	Title   string
	Nav     string // the highlighted navigation entry
	Session *session
	Now     time.Time
	// PollWindow and OnlineWithin explain "online" and "stranded".
	PollWindow   time.Duration
	OnlineWithin time.Duration
	// Live: the page keeps itself current over server-sent events.
	Live bool
	// DBFlag ends each CLI command a page names that opens the database:
	// " --db " and Options.DB, or "" when serve was given no --db.
	DBFlag string
	Data   any
}

// page serves one page: the whole document to a browser, or, to an
// EventSource (Accept: text/event-stream), a stream of the page's content
// whenever it changes.
func (d *Dashboard) page(name, nav string, load loader) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := d.authenticate(r.Context(), r)
		stream := streaming(r)
		if err != nil {
			if stream {
				d.signedOut(w)
				return
			}
			http.Redirect(w, r, Prefix+"login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if stream {
			d.stream(w, r, s, name, nav, load)
			return
		}
		title, data, err := load(r, s)
		if err != nil {
			d.fail(w, r, s, err)
			return
		}
		d.render(w, r, http.StatusOK, name, title, nav, s, data)
	})
}

// streaming reports whether r asks for a page's event stream (an
// EventSource), whose updates hold the page's content only.
func streaming(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

// render writes the whole page.
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, code int, name, title, nav string, s *session, data any) {
	var buf bytes.Buffer
	v := d.view(title, nav, s, data)
	v.Live = s != nil && name != "error"
	if err := d.pages[name].ExecuteTemplate(&buf, "layout", v); err != nil {
		d.log.Error("rendering a dashboard page", "page", name, "err", err)
		http.Error(w, "internal error rendering the page; see the automator's log", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// dbFlag is what the CLI commands the pages name are given beside
// --data-dir: serve's --db, when it was given one.
func (d *Dashboard) dbFlag() string {
	if d.o.DB == "" {
		return ""
	}
	return " --db " + d.o.DB
}

// content renders the live part of a page (what a stream sends).
func (d *Dashboard) content(name, title, nav string, s *session, data any) ([]byte, error) {
	var buf bytes.Buffer
	err := d.pages[name].ExecuteTemplate(&buf, "content", d.view(title, nav, s, data))
	return buf.Bytes(), err
}

func (d *Dashboard) view(title, nav string, s *session, data any) view {
	return view{
		Title:        title,
		Nav:          nav,
		Session:      s,
		Now:          d.o.Now(),
		PollWindow:   d.o.PollWindow,
		OnlineWithin: server.InstanceOnlineWithin(d.o.PollWindow),
		DBFlag:       d.dbFlag(),
		Data:         data,
	}
}

// fail answers with an error page: the message of an *httpError, or a
// generic one (details to the log) for anything else.
func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, s *session, err error) {
	var he *httpError
	if !errors.As(err, &he) && r.Context().Err() != nil {
		// Its visitor left (closed the tab, went elsewhere) while the
		// store worked for it: nothing went wrong here, nobody reads on.
		d.log.Debug("dashboard page: its visitor left before it was read", "path", r.URL.Path, "err", err)
		return
	}
	if !errors.As(err, &he) {
		d.log.Error("dashboard page", "path", r.URL.Path, "err", err)
		he = &httpError{http.StatusInternalServerError, "The automator could not read its store; see its log."}
		if store.IsDamaged(err) {
			he.msg = "The automator's database is damaged where this page reads: its operator must repair it (automator repair; see docs/backup.md and the automator's log)."
		}
	}
	d.render(w, r, he.code, "error", http.StatusText(he.code), "", s, he.msg)
}
