// Package printable says whether a name an operator chose (a proxy's
// instance_id, an automator's replica_id) can be shown as it is in
// listings, logs and terminals, and quotes a value for an error message.
package printable

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Check refuses s when it is not valid UTF-8, or holds a control character
// (a newline, a terminal's escape sequence: a forged row, a coloured
// terminal) or one that is not shown as it is (a zero-width space, a bidi
// override, a line separator: listings would show it as another name, or
// not as it is). Only printable characters and the ASCII space pass.
func Check(s string) error {
	switch {
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not valid UTF-8", quoted(s))
	case strings.ContainsFunc(s, unicode.IsControl):
		return fmt.Errorf("%s contains a control character", quoted(s))
	case FirstNotShown(s) >= 0:
		return fmt.Errorf("%s contains an invisible, format or separator character (only printable characters and the ASCII space)", quoted(s))
	}
	return nil
}

// notShown reports whether r is not shown as it is: anything but a
// printable character (letters, marks, numbers, punctuation, symbols and
// the ASCII space: unicode.IsPrint), and among those the ones that print
// as nothing, which Unicode lists as ignorable beside the format
// characters (the Hangul fillers U+115F, U+1160, U+3164 and U+FFA0, the
// combining grapheme joiner, the Khmer inherent vowels), and the braille
// pattern blank U+2800. Each would make a name that is shown as
// another's ("host-a" and "host-a" + U+3164). A variation selector is
// told by FirstNotShown, which knows what it follows.
func notShown(r rune) bool {
	return !unicode.IsPrint(r) || r == '\u2800' || unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r)
}

// FirstNotShown is the index in s of the first character not shown as it
// is, or -1: one notShown says so of, or a variation selector that does
// not follow a character beyond ASCII shown as it is. After an emoji
// (U+2764 U+FE0F), a Han ideograph (an ideographic variation sequence) or
// a Mongolian letter (its free variation selectors) it is part of how the
// name is written, as names were before such characters were refused (a
// review: "web-☁" + U+FE0F, an instance id, no longer started); after
// ASCII, at the start or after another, it prints as nothing ("host-a" +
// U+FE0F would be listed as "host-a").
func FirstNotShown(s string) int {
	prev := rune(-1)
	for i, r := range s {
		if notShown(r) {
			return i
		}
		if isVariationSelector(r) && (prev < utf8.RuneSelf || isVariationSelector(prev)) {
			return i
		}
		prev = r
	}
	return -1
}

func isVariationSelector(r rune) bool { return unicode.Is(unicode.Variation_Selector, r) }
