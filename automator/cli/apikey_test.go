package cli

import (
	"strings"
	"testing"
)

// TestAPIKeyNamesArePrintableCharactersCountedAsCharacters: `apikey create`
// takes a name of 1 to 64 printable characters, in any script (a name of
// 30 CJK characters is 90 bytes, and fits), and refuses, with its one-line
// reason and no key made, a name that is not valid UTF-8 or holds a
// character that is not printable: a C1 control such as U+009B, which a
// terminal reads as the start of an escape sequence, or a bidi override,
// which would show `apikey list` and `audit` lines other than they are.
func TestAPIKeyNamesArePrintableCharactersCountedAsCharacters(t *testing.T) {
	dir := initDir(t)
	for _, name := range []string{"ci", "deploy key", strings.Repeat("日本語", 10), strings.Repeat("é", 64)} {
		if code, _, stderr := runMain(t, "apikey", "create", name, "--all-accounts", "--data-dir", dir); code != 0 {
			t.Errorf("apikey create %q: exit %d: %s", name, code, stderr)
		}
	}
	for _, name := range []string{"", "bad\xff", "x\u009b2Jy", "a\u202egnp.exe", "tab\there", strings.Repeat("é", 65)} {
		code, stdout, stderr := runMain(t, "apikey", "create", name, "--all-accounts", "--data-dir", dir)
		if code != ExitError || stdout != "" || !strings.Contains(stderr, "must be 1 to 64 printable characters") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("apikey create %q: exit %d, stdout %q, stderr %q; want exit %d and one line naming the rule", name, code, stdout, stderr, ExitError)
		}
	}
	_, list, _ := runMain(t, "apikey", "list", "--data-dir", dir)
	if n := strings.Count(list, "\n"); n != 1+1+4 { // header, init's admin key, the four above
		t.Errorf("apikey list has %d lines, want 6:\n%s", n, list)
	}
}
