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
		return fmt.Errorf("%q is not valid UTF-8", s)
	case strings.ContainsFunc(s, unicode.IsControl):
		return fmt.Errorf("%q contains a control character", s)
	case strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }):
		return fmt.Errorf("%q contains an invisible, format or separator character (only printable characters and the ASCII space)", s)
	}
	return nil
}
