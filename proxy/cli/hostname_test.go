package cli

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// TestAHostNameIsReportedAsTheAutomatorTakesIt: the host name a proxy
// reports with its polls holds only characters the automator's listings
// take (its polls would be refused otherwise, one after another), each
// other one replaced by U+FFFD, and at most 255 bytes, cut between
// characters; an ordinary host name is reported as it is.
func TestAHostNameIsReportedAsTheAutomatorTakesIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"web-01.example.com", "web-01.example.com"},
		{"höst", "höst"},
		{"p1\u200b", "p1\ufffd"},
		{"a\u202eb", "a\ufffdb"},
		{"a\nb\tc\x1b[31m", "a\ufffdb\ufffdc\ufffd[31m"},
		{"a\u2028b", "a\ufffdb"},
	} {
		if got := reportedHostname(tc.in); got != tc.want {
			t.Errorf("reportedHostname(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	long := strings.Repeat("é", 200) // 400 bytes
	got := reportedHostname(long)
	if len(got) > maxReportedHostname || !utf8.ValidString(got) || !strings.HasPrefix(long, got) || len(got) < maxReportedHostname-1 {
		t.Errorf("a host name of %d bytes reported as %d bytes (valid UTF-8 %v, a prefix %v); want its first whole characters within %d", len(long), len(got), utf8.ValidString(got), strings.HasPrefix(long, got), maxReportedHostname)
	}
	if i := strings.IndexFunc(reportedHostname("x\u00ady\u0085z"), func(r rune) bool { return !unicode.IsPrint(r) }); i >= 0 {
		t.Errorf("a soft hyphen and NEL left in the reported host name")
	}
}
