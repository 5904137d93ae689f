package pki

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"
)

// DefaultReloadEvery is how often, at most, a CertReloader looks at its
// files: a renewed certificate is served within this long.
const DefaultReloadEvery = 5 * time.Second

// CertReloader serves a certificate from a pair of PEM files and picks up
// a renewed pair without a restart: at most every Every, on a TLS
// handshake or a call of Certificate, it looks at the files' size,
// modification time and identity (a renewal that renames new files into
// place changes the identity), and loads them again when one changed. A
// pair that does not load (for example a look between the renames of a
// renewal) leaves the current certificate in service and is tried again
// at the next look.
type CertReloader struct {
	certFile, keyFile string
	// Every bounds how often the files are looked at; 0 looks at every
	// handshake (tests).
	Every time.Duration
	// OnReload, when set, is called after a renewed pair was loaded, or
	// with the error when a changed pair still did not load at a look
	// about Every after the one that found it.
	OnReload func(err error)

	mu       sync.Mutex
	cert     *tls.Certificate
	stamp    [2]fileStamp // of the pair in cert
	lastLook time.Time
	failed   [2]fileStamp // of the last pair that did not load
	failedAt time.Time    // when a look first found it
	reported bool         // that pair's error was passed to OnReload
	now      func() time.Time
}

type fileStamp struct {
	info os.FileInfo
}

func (a fileStamp) same(b fileStamp) bool {
	if a.info == nil || b.info == nil {
		return a.info == nil && b.info == nil
	}
	return os.SameFile(a.info, b.info) && a.info.Size() == b.info.Size() && a.info.ModTime().Equal(b.info.ModTime())
}

// NewCertReloader loads the pair once (an error if it does not load) and
// returns a reloader looking at it every DefaultReloadEvery.
func NewCertReloader(certFile, keyFile string) (*CertReloader, error) {
	r := &CertReloader{certFile: certFile, keyFile: keyFile, Every: DefaultReloadEvery, now: time.Now}
	st, err := r.stat()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading server certificate %q with key %q: %w", certFile, keyFile, err)
	}
	r.cert, r.stamp, r.lastLook = &cert, st, r.now()
	return r, nil
}

func (r *CertReloader) stat() ([2]fileStamp, error) {
	var st [2]fileStamp
	for i, f := range []string{r.certFile, r.keyFile} {
		info, err := os.Stat(f)
		if err != nil {
			return st, fmt.Errorf("loading server certificate: %w", err)
		}
		st[i] = fileStamp{info}
	}
	return st, nil
}

// GetCertificate is tls.Config.GetCertificate.
func (r *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.Certificate(), nil
}

// Look looks at the files now, whenever the last look was, and returns
// the certificate in service: for a caller that looks every Every itself
// (a throttled look on a ticker of that period skips every other tick, its
// ticks a little less than Every apart).
func (r *CertReloader) Look() *tls.Certificate {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastLook = r.now()
	r.look()
	return r.cert
}

// Certificate returns the certificate in service, after a look at the
// files when Every has passed since the last: what /metrics and the log
// say of the certificate in service follows a renewal as the handshakes
// do, not only once a new connection has made one (a review: proxies on
// their long-lived connections kept the alert on an expiring certificate
// firing after its renewal).
func (r *CertReloader) Certificate() *tls.Certificate {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.now(); now.Sub(r.lastLook) >= r.Every {
		r.lastLook = now
		r.look()
	}
	return r.cert
}

// look loads the pair again if it changed since it was loaded.
func (r *CertReloader) look() {
	st, err := r.stat()
	if err != nil || (st[0].same(r.stamp[0]) && st[1].same(r.stamp[1])) {
		return // gone for a moment (a renewal in progress), or unchanged
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		// A renewal renames its two files one after the other, so a look
		// between them sees a pair that does not match: reported only if
		// a look Every later finds the same pair (Look and a handshake's
		// look may come a moment apart, both between the renames), and
		// then once.
		now := r.now()
		if !st[0].same(r.failed[0]) || !st[1].same(r.failed[1]) {
			r.failed, r.failedAt, r.reported = st, now, false
			return
		}
		// A tenth of Every to spare: serve's ticker of that period ticks
		// a little less than Every apart.
		if !r.reported && now.Sub(r.failedAt) >= r.Every-r.Every/10 {
			r.reported = true
			if r.OnReload != nil {
				r.OnReload(fmt.Errorf("loading renewed server certificate %q (keeping the current one): %w", r.certFile, err))
			}
		}
		return
	}
	r.cert, r.stamp = &cert, st
	if r.OnReload != nil {
		r.OnReload(nil)
	}
}
