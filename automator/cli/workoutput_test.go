package cli

import (
	"strings"
	"testing"
)

// TestAStreamCutWithinACharacterIsTextUpToIt: the proxy cuts a stream at
// its output limit by bytes, within a character as often as not; such a
// stream's text is what comes before that character, not null (a review:
// nearly every truncated non-ASCII output lost its text). A stream that
// was not cut, or whose bytes are not UTF-8 before the cut, has none.
func TestAStreamCutWithinACharacterIsTextUpToIt(t *testing.T) {
	t.Parallel()
	euros := "€€" // e2 82 ac, twice
	for _, c := range []struct {
		name      string
		b         string
		truncated bool
		want      *string
	}{
		{"cut within the second", euros[:5], true, ptr("€")},
		{"cut after its first byte", euros[:4], true, ptr("€")},
		{"cut between them", euros[:3], true, ptr("€")},
		{"whole", euros, false, ptr(euros)},
		{"not cut, ending within one", euros[:5], false, nil},
		{"cut, not UTF-8 before", "a\xffb" + euros[:4], true, nil},
		{"cut, a stray continuation byte at its end", "ab\x82", true, nil},
	} {
		v := newOutputView([]byte(c.b), nil, c.truncated, false)
		if (v.Stdout == nil) != (c.want == nil) || (v.Stdout != nil && *v.Stdout != *c.want) {
			t.Errorf("%s: stdout text %v; want %v", c.name, show(v.Stdout), show(c.want))
		}
		if string(v.StdoutBase64) != c.b {
			t.Errorf("%s: stdout bytes %q; want them all, %q", c.name, v.StdoutBase64, c.b)
		}
	}
}

func ptr(s string) *string { return &s }

func show(s *string) string {
	if s == nil {
		return "null"
	}
	return "\"" + *s + "\""
}

// TestWorkShowEscapesControlCharactersOnATerminal: a script's output
// shown on a terminal cannot clear the screen, set its title or write
// bytes the terminal takes for commands (a review: work show --reveal
// passed ESC sequences through); piped, it is given byte for byte.
func TestWorkShowEscapesControlCharactersOnATerminal(t *testing.T) {
	t.Parallel()
	in := []byte("ok\x1b[2J\x1b]0;pwned\a\n\xff\tč\u0085end \u202eevil")
	got, note := forTerminal(in, true)
	if want := `ok\x1b[2J\x1b]0;pwned\x07` + "\n" + `\xff` + "\tč" + `\u0085end \u202eevil`; got != want {
		t.Errorf("on a terminal: %q, want %q", got, want)
	}
	if !strings.Contains(note, "control characters escaped on a terminal") {
		t.Errorf("on a terminal the heading's note is %q, want it to say what was escaped", note)
	}
	if got, note := forTerminal(in, false); got != string(in) || note != "" {
		t.Errorf("piped: %q with note %q, want the bytes as they are and no note", got, note)
	}
	if got, note := forTerminal([]byte("plain\ttext ❤️\n"), true); got != "plain\ttext ❤️\n" || note != "" {
		t.Errorf("plain text on a terminal: %q with note %q, want it as it is and no note", got, note)
	}
}
