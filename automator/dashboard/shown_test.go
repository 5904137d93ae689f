package dashboard_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestAScriptNameOrArgumentNotShownAsItIsIsQuoted: a script name and its
// arguments are the caller's, unchecked (a script gets its arguments as
// they are). One holding a character a page does not show as it is (a
// bidi override, which reverses what follows; a zero-width space; a line
// break or a run of spaces, which HTML shows as one space; an escape
// sequence) or an empty one is shown quoted in Go syntax, as `automator
// work show --reveal` shows arguments, so the operator sees what ran; a
// plain one is shown as it is.
func TestAScriptNameOrArgumentNotShownAsItIsIsQuoted(t *testing.T) {
	e := newEnv(t)
	now := e.clock.Now()
	e.enqueue("w_bidi", "acme", now.Add(-time.Minute), &automatorv1.Command{Script: "safe\u202ehs.mr",
		Args: []string{"--dry-run\u200b", "a\nb", "two  spaces", " lead", "", "\x1b[2Jx", "plain arg"}})
	e.run("acme", "a-1", now.Add(-59*time.Second), now.Add(-58*time.Second), &automatorv1.Result{})
	c := client(t)
	e.signIn(c, e.url, "admin")
	for page, want := range map[string][]string{
		"/dashboard/work": {`<code>&#34;safe\u202ehs.mr&#34;</code>`},
		"/dashboard/work/w_bidi": {`<code id="unit-script">&#34;safe\u202ehs.mr&#34;</code>`,
			`<li><code>&#34;--dry-run\u200b&#34;</code></li>`, `<li><code>&#34;a\nb&#34;</code></li>`,
			`<li><code>&#34;two  spaces&#34;</code></li>`, `<li><code>&#34; lead&#34;</code></li>`,
			`<li><code>&#34;&#34;</code></li>`, `<li><code>&#34;\x1b[2Jx&#34;</code></li>`, `<li><code>plain arg</code></li>`},
	} {
		code, body := get(t, c, e.url+page)
		if code != http.StatusOK {
			t.Fatalf("%s: %d", page, code)
		}
		if strings.ContainsAny(body, "\u202e\u200b\x1b") {
			t.Errorf("%s holds a character not shown as it is:\n%s", page, body)
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("%s lacks %s:\n%s", page, w, body)
			}
		}
	}
}

// TestOutputThatIsNotUTF8IsShownAsReplacementCharacters: a script's
// output may be any bytes; its page, served as UTF-8, stays UTF-8, bytes
// that are not shown as U+FFFD (a review found them raw in a page), and
// markup in it escaped.
func TestOutputThatIsNotUTF8IsShownAsReplacementCharacters(t *testing.T) {
	e := newEnv(t)
	now := e.clock.Now()
	e.enqueue("w_bytes", "acme", now.Add(-time.Minute), &automatorv1.Command{Script: "dump.sh"})
	e.run("acme", "a-1", now.Add(-59*time.Second), now.Add(-58*time.Second), &automatorv1.Result{Stdout: []byte("ok \xff\xfe <b>"), Stderr: []byte("é\xc3")})
	c := client(t)
	e.signIn(c, e.url, "admin")
	code, body := get(t, c, e.url+"/dashboard/work/w_bytes")
	if code != http.StatusOK || !utf8.ValidString(body) || !strings.Contains(body, "ok \uFFFD &lt;b&gt;") || !strings.Contains(body, "é\uFFFD") {
		t.Errorf("the page of a unit whose output is not UTF-8: %d, valid UTF-8 %v\n%s", code, utf8.ValidString(body), body)
	}
}
