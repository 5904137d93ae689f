package printable

import (
	"strings"
	"testing"
)

// TestQuoteCutsALongValueAtACharacterAndSaysItsLength: a value up to
// MaxQuoted bytes is quoted whole, as %q would; a longer one is cut at
// MaxQuoted bytes or, inside a character, at that character's start (no
// half character shown as \x escapes), and says how long it was.
func TestQuoteCutsALongValueAtACharacterAndSaysItsLength(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"acme", `"acme"`},
		{"a\nb", `"a\nb"`},
		{strings.Repeat("x", MaxQuoted), `"` + strings.Repeat("x", MaxQuoted) + `"`},
		{strings.Repeat("x", 7000), `"` + strings.Repeat("x", MaxQuoted) + `"… (7000 bytes)`},
		// 79 bytes, then "é" (2 bytes) across the cut: cut before it.
		{strings.Repeat("x", MaxQuoted-1) + "é" + strings.Repeat("y", 10), `"` + strings.Repeat("x", MaxQuoted-1) + `"… (91 bytes)`},
	} {
		got := Quote(c.in)
		if got != c.want {
			t.Errorf("Quote(%d bytes) = %s; want %s", len(c.in), got, c.want)
		}
	}
}
