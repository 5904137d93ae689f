package printable

import (
	"strings"
	"testing"
)

// TestCheckPassesOnlyWhatIsShownAsItIs: a name of printable characters
// and ASCII spaces passes, beyond ASCII too; one that is not UTF-8, or
// holds a control character, or a character shown otherwise or not at
// all (a space other than U+0020, a zero-width space, a bidi override, a
// line separator, a Hangul filler or the braille blank, which are
// printable but print as nothing, a variation selector after ASCII or at
// the start), is refused, saying which of these it is. Hangul itself,
// combining accents, and a variation selector after an emoji, a Han
// ideograph or a Mongolian letter pass.
func TestCheckPassesOnlyWhatIsShownAsItIs(t *testing.T) {
	for s, want := range map[string]string{
		"host-a":        "",
		"rack 3":        "",
		"hôte-名 (β)":    "",
		"h\xffst":       "is not valid UTF-8",
		"a\tb":          "contains a control character",
		"a\nb":          "contains a control character",
		"\x1b[31mred":   "contains a control character",
		"a\u009bb":      "contains a control character",
		"rack\u00a03":   "contains an invisible, format or separator character",
		"rack\u30003":   "contains an invisible, format or separator character",
		"host-a\u200b":  "contains an invisible, format or separator character",
		"host-\u202ea":  "contains an invisible, format or separator character",
		"host\u2028a":   "contains an invisible, format or separator character",
		"host-a\u3164":  "contains an invisible, format or separator character",
		"\u115fhost":    "contains an invisible, format or separator character",
		"host\uffa0a":   "contains an invisible, format or separator character",
		"host\u2800":    "contains an invisible, format or separator character",
		"host\u034fa":   "contains an invisible, format or separator character",
		"host-a\ufe0f":  "contains an invisible, format or separator character",
		"\ufe0fhost":    "contains an invisible, format or separator character",
		"☁\ufe0f\ufe0f": "contains an invisible, format or separator character",
		// A variation selector after an emoji, a Han ideograph or a
		// Mongolian letter is how the name is written.
		"web-☁\ufe0f":  "",
		"❤\ufe0f-prod": "",
		"葛\U000e0100城": "",
		"ᠠᠨ\u180bᠠ":    "",
		"한국-호스트":       "",
		"café\u0301":   "",
	} {
		err := Check(s)
		switch {
		case want == "" && err != nil:
			t.Errorf("Check(%q) = %v, want nil", s, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("Check(%q) = %v, want an error saying it %s", s, err, want)
		}
	}
}
