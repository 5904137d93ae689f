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

// TestQuoteEscapesWhatPrintsAsNothing: a character strconv.Quote leaves as
// it is because Unicode counts it printable, but which prints as nothing
// (a Hangul filler, the braille blank, a variation selector), is escaped
// as \u is for the invisible characters strconv.Quote escapes itself, so a
// refused name is not shown as the name it imitates; Shown quotes such a
// name the same way, and other scripts are left as they are.
func TestQuoteEscapesWhatPrintsAsNothing(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"host-a\u3164":  `"host-a\u3164"`,
		"host\u2800":    `"host\u2800"`,
		"a\ufe0f\u200b": `"a\ufe0f\u200b"`,
		"x\U000e0100":   `"x\U000e0100"`,
		"호스트-é":         `"호스트-é"`,
	} {
		if got := Quote(in); got != want {
			t.Errorf("Quote(%+q) = %s; want %s", in, got, want)
		}
	}
	if got, want := Shown("host-a\u3164"), `"host-a\u3164"`; got != want {
		t.Errorf("Shown(%+q) = %s; want %s", "host-a\u3164", got, want)
	}
	if err := Check("host-a\u3164"); err == nil || !strings.Contains(err.Error(), `"host-a\u3164"`) {
		t.Errorf("Check(%+q) = %v; want an error quoting it escaped", "host-a\u3164", err)
	}
}
