package printable

import (
	"fmt"
	"strconv"
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
		return strconv.Quote(s)
	}
	cut := MaxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:cut], len(s))
}
