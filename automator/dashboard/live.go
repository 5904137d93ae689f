package dashboard

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// stream sends the page's content as a server-sent "update" event at once
// and again whenever it changes (it is read again every Refresh), and a
// comment every Keepalive so that proxies and load balancers see traffic.
// The session is checked at every read: one signed out of (on any replica),
// expired, or whose key was revoked gets "signedout" and the stream ends.
//
// Every write has WriteTimeout to reach the client: one that stopped
// reading blocks a write once its socket buffers are full, and is dropped
// when that write's deadline passes; the stream then ends.
func (d *Dashboard) stream(w http.ResponseWriter, r *http.Request, s *session, name, nav string, load loader) {
	defer d.streamsEnded.add(1)
	// A page that does not exist (or a bad filter) is refused before the
	// stream begins: the browser's EventSource then stops, where a stream
	// that ends would be reconnected to forever.
	title, data, err := load(r, s)
	var he *httpError
	if errors.As(err, &he) {
		http.Error(w, he.msg, he.code)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	// Reconnect after 2 s if the stream breaks (the browser does it).
	if !d.write(w, []byte("retry: 2000\n\n")) {
		return
	}
	if !d.openLive(s.KeyID) {
		// A stream that ends is reconnected to: "paused" tells the page
		// to stop, as it is.
		d.write(w, event("paused", []byte(fmt.Sprintf("not live: this API key has %d live pages open on this automator, the most it may; close some, then reload this one", d.o.MaxLiveStreamsPerKey))))
		return
	}
	defer d.closeLive(s.KeyID)
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
			if st, ok := data.(settled); ok && err == nil && last != nil && st.unchanged(r.Context(), d.o.Store) {
				return true // sent, and still so
			}
			title, data, err = load(r, s)
		}
		first = false
		if err != nil && r.Context().Err() != nil {
			// The visitor left during the read (closed the tab, went to
			// another page): the read failed for that, and the stream is
			// over. Nothing went wrong.
			return false
		}
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
		return d.write(w, event("update", body))
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
			if !d.write(w, []byte(": keepalive\n\n")) {
				return
			}
		}
	}
}

// openLive counts an event stream of the API key keyID open, unless the
// key holds MaxLiveStreamsPerKey already; it reports whether it did.
func (d *Dashboard) openLive(keyID string) bool {
	d.liveMu.Lock()
	defer d.liveMu.Unlock()
	if d.live[keyID] >= d.o.MaxLiveStreamsPerKey {
		return false
	}
	d.live[keyID]++
	return true
}

// closeLive counts an event stream of keyID that openLive counted closed.
func (d *Dashboard) closeLive(keyID string) {
	d.liveMu.Lock()
	defer d.liveMu.Unlock()
	if d.live[keyID]--; d.live[keyID] == 0 {
		delete(d.live, keyID)
	}
}

// settled is the data of a page that changes no more once loaded but for
// what a cheap read tells (an ended unit's): a live page's refresh asks it
// whether it still stands before reading and rendering the page again.
type settled interface {
	unchanged(ctx context.Context, st Store) bool
}

// signedOut tells an event stream that its session is over; the page then
// goes to the sign-in form.
func (d *Dashboard) signedOut(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	d.write(w, event("signedout", []byte("sign in again")))
}

// write writes b to an event stream and flushes it, within WriteTimeout
// (a deadline on the connection, reset for every write). It reports
// whether b went out; after false the stream is over.
func (d *Dashboard) write(w http.ResponseWriter, b []byte) bool {
	rc := http.NewResponseController(w)
	// Real time, not Options.Now: the deadline is the socket's.
	err := rc.SetWriteDeadline(time.Now().Add(d.o.WriteTimeout))
	if err != nil && !errors.Is(err, http.ErrNotSupported) {
		return false
	}
	if errors.Is(err, http.ErrNotSupported) {
		d.deadlineOnce.Do(func() {
			d.log.Warn("dashboard: this connection takes no write deadline; a client that stops reading holds its event stream until it goes away")
		})
	}
	if _, err := w.Write(b); err != nil {
		return false
	}
	return rc.Flush() == nil
}

// event is one event of a stream; each line of data becomes a "data:"
// line. A browser ends a line of the stream at CRLF, LF or a lone CR, so
// all three end a line of data here: a CR in what a page shows (a progress
// meter in a script's output, a host name a proxy reports) would otherwise
// cut the update short and start fields or events of its own. The page
// loses nothing: HTML turns every CR into a LF as well.
func event(name string, data []byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "event: %s\n", name)
	data = bytes.ReplaceAll(data, []byte("\r\n"), []byte("\n"))
	data = bytes.ReplaceAll(data, []byte("\r"), []byte("\n"))
	for _, line := range bytes.Split(data, []byte("\n")) {
		b.WriteString("data: ")
		b.Write(line)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	return b.Bytes()
}

// counter is a count that can be waited on.
type counter struct {
	mu      sync.Mutex
	n       int
	changed chan struct{} // closed, and replaced, at every change
}

func (c *counter) add(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += n
	if c.changed != nil {
		close(c.changed)
	}
	c.changed = make(chan struct{})
}

// get returns the count and a channel closed at its next change.
func (c *counter) get() (int, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.changed == nil {
		c.changed = make(chan struct{})
	}
	return c.n, c.changed
}
