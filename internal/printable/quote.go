package printable

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxQuoted is how much of a value Quote shows: more than any valid name or
// id, and never a caller's kilobytes back to them (into a page, a status, a
// terminal) or into a log.
const MaxQuoted = 80

// Quote quotes s for an error message, in Go syntax (as %q does); a value
// longer than MaxQuoted bytes is cut there, at a character's start, and
// its length given: "abc…" (7000 bytes).
func Quote(s string) string {
	if len(s) <= MaxQuoted {
		return quoted(s)
	}
	cut := MaxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", quoted(s[:cut]), len(s))
}

// quoted is s in Go syntax, as strconv.Quote writes it, with the
// characters that strconv.Quote leaves as they are but notShown counts
// invisible (a Hangul filler, the braille blank), and variation
// selectors, escaped too: "x\u3164", not a quoted name that looks like
// "x".
func quoted(s string) string {
	q := strconv.Quote(s)
	escaped := func(r rune) bool { return notShown(r) || isVariationSelector(r) }
	if !strings.ContainsFunc(q, escaped) {
		return q
	}
	var b strings.Builder
	for _, r := range q {
		switch {
		case !escaped(r):
			b.WriteRune(r)
		case r > 0xffff:
			fmt.Fprintf(&b, `\U%08x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

// Token is a token a message names (an HTTP method: printable ASCII, but
// of any length): as it is, or quoted cut (Quote) when longer than
// MaxQuoted bytes.
func Token(s string) string {
	if len(s) > MaxQuoted {
		return Quote(s)
	}
	return s
}

// Shown is a caller's text (a script name, an argument) as a listing or a
// page shows it: as it is when it shows as it is, else quoted in Go syntax
// (as %q does). Quoted is one that is empty, holds a character Check
// refuses (a control character, as an escape sequence's; a bidi override
// that reverses what follows; a zero-width space), or spaces that do not
// show (at an end, or two together): the operator sees what ran, not
// another name or argument.
func Shown(s string) string {
	if s == "" || Check(s) != nil || strings.HasPrefix(s, " ") || strings.HasSuffix(s, " ") || strings.Contains(s, "  ") {
		return quoted(s)
	}
	return s
}
