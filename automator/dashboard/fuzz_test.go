package dashboard

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzSafeNext feeds arbitrary next= values (the sign-in form's, which
// anyone may put in a link) through safeNext and the redirect that follows
// a sign-in. The page the browser lands on is always on the automator's
// own host and under the dashboard's path, as a browser resolves the
// Location header: tabs and newlines dropped, a backslash taken for a
// slash, dot segments (also percent-encoded ones) removed.
func FuzzSafeNext(f *testing.F) {
	for _, seed := range []string{
		"/dashboard/work", "/dashboard/work?account=acme&state=queued", "/dashboard/work/w_0123456789abcdef0123456789abcdef",
		"/dashboard/", "/dashboard", "", "/", "//evil.example/dashboard/", "https://evil.example/dashboard/",
		"/dashboard/\\evil",
		"/dashboard/\t/x", "/dashboard/x\r\nSet-Cookie: a=b", "/dashboard/@evil.example", "/dashboard/?next=//evil",
		"/dashboard/work#frag", "/dashboard/a%2fb", "/dashboard//x",
	} {
		f.Add(seed)
	}
	base, _ := url.Parse("https://automator.example:8443" + Prefix + "login")
	browser := strings.NewReplacer("\t", "", "\n", "", "\r", "", "\\", "/")
	f.Fuzz(func(t *testing.T, next string) {
		got := safeNext(next)
		if got != Prefix && got != next {
			t.Fatalf("safeNext(%q) = %q, neither the value nor the dashboard", next, got)
		}
		w := httptest.NewRecorder()
		http.Redirect(w, httptest.NewRequest(http.MethodPost, base.String(), nil), got, http.StatusSeeOther)
		loc := w.Header().Get("Location")
		u, err := base.Parse(browser.Replace(loc))
		if err != nil {
			t.Fatalf("safeNext(%q) = %q, redirected to %q, which does not parse: %v", next, got, loc, err)
		}
		landed := path.Clean(u.Path) + "/"
		if u.Scheme != base.Scheme || u.Host != base.Host || u.User != nil || !strings.HasPrefix(landed, Prefix) {
			t.Fatalf("safeNext(%q) = %q, redirected to %q: the browser lands on %s://%s%s, off the dashboard", next, got, loc, u.Scheme, u.Host, u.Path)
		}
	})
}

// FuzzSessionCookie: a session cookie's value decodes to the session it
// was made for, and one changed in any byte (or anything else a visitor
// sends) decodes to nothing else.
func FuzzSessionCookie(f *testing.F) {
	f.Add("c2Vzc2lvbi1pZC0xMjM0NQ", "k_0123456789ab", strings.Repeat("ab", 32), int64(1893456000), 10, byte('A'), "")
	f.Add("i", "k", "", int64(0), 0, byte('.'), "eyJpIjoiYSJ9.AAAA")
	f.Add("", "k", "00", int64(-1), 3, byte(0), "..")
	d := &Dashboard{sessionKey: bytes.Repeat([]byte{7}, 32)}
	now := time.Unix(1700000000, 0)
	f.Fuzz(func(t *testing.T, id, keyID, hash string, expires int64, at int, b byte, raw string) {
		if !utf8.ValidString(id) || !utf8.ValidString(keyID) || !utf8.ValidString(hash) {
			return // JSON would change them; the automator makes them valid
		}
		_, _ = d.decode(raw, now)
		s := session{ID: id, KeyID: keyID, Hash: hash, Expires: expires}
		v := d.encode(s)
		got, err := d.decode(v, now)
		switch {
		case id == "":
			if err == nil {
				t.Fatalf("a session without an id decoded: %+v", got)
			}
		case expires <= now.Unix():
			if _, ended := err.(endedErr); !ended || got != s {
				t.Fatalf("an expired session decoded to %+v, %v; want %+v and its end", got, err, s)
			}
		case err != nil || got != s:
			t.Fatalf("decode(encode(%+v)) = %+v, %v", s, got, err)
		}
		if at < 0 {
			at = -at
		}
		at %= len(v)
		if v[at] == b {
			return
		}
		tampered := v[:at] + string([]byte{b}) + v[at+1:]
		if got, err := d.decode(tampered, now); (err == nil || got != session{}) && got != s {
			t.Fatalf("cookie %q changed at byte %d to %q decoded to %+v, %v", v, at, tampered, got, err)
		}
	})
}
