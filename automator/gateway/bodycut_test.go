package gateway_test

import (
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/opsgate/opsgate/automator/automatortest"
)

// TestADecodeErrorIsCutOnARuneBoundary: the decode error a body that does
// not decode is answered with is cut to its bound on a rune boundary, so
// an unknown field whose long name is not ASCII is still answered 400
// with the cut error, not 500 "failed to marshal error message" for an
// error cut in the middle of a rune. The name is padded with 0, 1 and 2
// ASCII bytes so that the cut falls on each byte of a two-byte rune.
func TestADecodeErrorIsCutOnARuneBoundary(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	c := api{t: t, base: a.HTTPURL, apiKey: a.APIKey}
	for pad := range 3 {
		name := strings.Repeat("a", pad) + strings.Repeat("é", 300)
		r := c.do("POST", "/v1/accounts/acme/submit", "", `{"command": {"script": "hello.sh"}, "`+name+`": 1}`)
		msg := r.str("message")
		if r.status != http.StatusBadRequest || !strings.Contains(msg, "unknown field") || !strings.Contains(msg, "(cut at ") || !utf8.ValidString(msg) {
			t.Errorf("an unknown field of %d ASCII bytes and 300 é: HTTP %d, message %.120q (valid UTF-8: %v); want 400 naming the unknown field, cut, in valid UTF-8:\n%.300s", pad, r.status, msg, utf8.ValidString(msg), r.raw)
		}
	}
	if n := a.CountWork(t); n != 0 {
		t.Errorf("%d units queued", n)
	}
}
