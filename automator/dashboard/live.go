package dashboard

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// stream sends the page's content as a server-sent "update" event at once
// and again whenever it changes (it is read again every Refresh), and a
// comment every Keepalive so that proxies and load balancers see traffic.
// The session is checked at every read: a revoked key gets "signedout".
func (d *Dashboard) stream(w http.ResponseWriter, r *http.Request, s *session, name, nav string, load loader) {
	// A page that does not exist (or a bad filter) is refused before the
	// stream begins: the browser's EventSource then stops, where a stream
	// that ends would be reconnected to forever.
	title, data, err := load(r, s)
	var he *httpError
	if errors.As(err, &he) {
		http.Error(w, he.msg, he.code)
		return
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	// Reconnect after 2 s if the stream breaks (the browser does it).
	if _, err := fmt.Fprint(w, "retry: 2000\n\n"); err != nil || rc.Flush() != nil {
		return
	}
	refresh := time.NewTicker(d.o.Refresh)
	defer refresh.Stop()
	keepalive := time.NewTicker(d.o.Keepalive)
	defer keepalive.Stop()
	var last []byte
	var lastErr string
	first := true
	send := func() bool {
		if !first {
			if err := d.recheck(r.Context(), s); err != nil {
				d.signedOut(w)
				return false
			}
			title, data, err = load(r, s)
		}
		first = false
		if err != nil {
			// Keep the last content; the next read may succeed. Log a
			// failure once, not at every refresh.
			if err.Error() != lastErr {
				d.log.Warn("dashboard: refreshing a live page", "path", r.URL.Path, "err", err)
			}
			lastErr = err.Error()
			return true
		}
		lastErr = ""
		body, rerr := d.content(name, title, nav, s, data)
		if rerr != nil {
			d.log.Error("rendering a dashboard page", "page", name, "err", rerr)
			return false
		}
		if bytes.Equal(body, last) {
			return true
		}
		last = body
		return writeEvent(w, "update", body) == nil && rc.Flush() == nil
	}
	if !send() {
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-d.stop:
			return
		case <-refresh.C:
			if !send() {
				return
			}
		case <-keepalive.C:
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

// signedOut tells an event stream that its session is over; the page then
// goes to the sign-in form.
func (d *Dashboard) signedOut(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	_ = writeEvent(w, "signedout", []byte("sign in again"))
	_ = http.NewResponseController(w).Flush()
}

// writeEvent writes one event; each line of data becomes a "data:" line.
// A browser ends a line of the stream at CRLF, LF or a lone CR, so all
// three end a line of data here: a CR in what a page shows (a progress
// meter in a script's output, a host name a proxy reports) would otherwise
// cut the update short and start fields or events of its own. The page
// loses nothing: HTML turns every CR into a LF as well.
func writeEvent(w http.ResponseWriter, event string, data []byte) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "event: %s\n", event)
	data = bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n"))
	data = bytes.ReplaceAll(data, []byte("\r"), []byte("\n"))
	for _, line := range bytes.Split(data, []byte("\n")) {
		b.WriteString("data: ")
		b.Write(line)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	_, err := w.Write(b.Bytes())
	return err
}
