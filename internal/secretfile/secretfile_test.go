package secretfile

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

func encode16(s string, bigEndian bool) []byte {
	var b []byte
	for _, u := range utf16.Encode([]rune(s)) {
		if bigEndian {
			b = append(b, byte(u>>8), byte(u))
		} else {
			b = append(b, byte(u), byte(u>>8))
		}
	}
	return b
}

// TestTextDecodesWhatShellsWrite: the same secret comes out of UTF-8 with
// or without a byte-order mark and of UTF-16 LE or BE with one, with
// surrounding whitespace and CRLF dropped; what cannot be read as text is
// refused naming the encoding, without quoting the content.
func TestTextDecodesWhatShellsWrite(t *testing.T) {
	const secret = "oak_Zm9vYmFyLWJhei1xdXV4"
	for name, data := range map[string][]byte{
		"UTF-8":                 []byte(secret),
		"UTF-8, CRLF":           []byte(" " + secret + "\r\n"),
		"UTF-8 with BOM":        []byte("\ufeff" + secret + "\r\n"),
		"UTF-16 LE with BOM":    append([]byte{0xFF, 0xFE}, encode16(secret+"\r\n", false)...),
		"UTF-16 BE with BOM":    append([]byte{0xFE, 0xFF}, encode16(secret+"\r\n", true)...),
		"UTF-16 LE, no newline": append([]byte{0xFF, 0xFE}, encode16(secret, false)...),
	} {
		got, err := Text(data)
		if err != nil || got != secret {
			t.Errorf("%s: Text = %q, %v; want the secret", name, got, err)
		}
	}
	if got, err := Text(nil); err != nil || got != "" {
		t.Errorf("empty: Text = %q, %v; want empty, no error", got, err)
	}
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"UTF-16 LE without BOM":  {encode16(secret, false), "UTF-16 without a byte-order mark"},
		"UTF-16 BE without BOM":  {encode16(secret, true), "UTF-16 without a byte-order mark"},
		"UTF-16 LE, odd length":  {append([]byte{0xFF, 0xFE}, append(encode16(secret, false), 'x')...), "UTF-16 little-endian (as Windows PowerShell 5's > writes): an odd number of bytes"},
		"UTF-16, lone surrogate": {[]byte{0xFF, 0xFE, 0x00, 0xD8, 'a', 0}, "not valid UTF-16"},
		"binary":                 {[]byte{0xC3, 0x28, 0xA0, 0xA1}, "not UTF-8 or UTF-16 text"},
	} {
		_, err := Text(tc.data)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), secret) {
			t.Errorf("%s: Text error %v; want one saying %q, never the content", name, err, tc.want)
		}
	}
}

// FuzzDecode: a text reads the same from UTF-8 with or without a
// byte-order mark and from UTF-16 of either order with one; whatever the
// bytes, what is read is UTF-8 (of UTF-8 with a byte-order mark, the bytes
// after it), and what is refused is one line that quotes none of them.
func FuzzDecode(f *testing.F) {
	f.Add("oak_Zm9vYmFyLWJhei1xdXV4", []byte("\xff\xfeo\x00a\x00k\x00"))
	f.Add("automator_url: https://a:1\r\ntoken: t\r\n", []byte("\xfe\xff\x00a\xd8\x00"))
	f.Add("é✓😀", []byte("a\x00b\x00"))
	f.Add("", []byte("\xef\xbb\xbf\xff"))
	f.Fuzz(func(t *testing.T, text string, data []byte) {
		if utf8.ValidString(text) && !strings.HasPrefix(text, "\ufeff") && !(len(text) >= 2 && (text[0] == 0) != (text[1] == 0)) {
			for name, enc := range map[string][]byte{
				"UTF-8":             []byte(text),
				"UTF-8 with BOM":    append([]byte("\ufeff"), text...),
				"UTF-16 LE and BOM": append([]byte{0xFF, 0xFE}, encode16(text, false)...),
				"UTF-16 BE and BOM": append([]byte{0xFE, 0xFF}, encode16(text, true)...),
			} {
				if got, err := Decode(enc); err != nil || got != text {
					t.Fatalf("%s of %q decoded to %q, %v", name, text, got, err)
				}
			}
		}
		got, err := Decode(data)
		if err != nil {
			if msg := err.Error(); strings.ContainsAny(msg, "\r\n") || (len(data) >= 4 && strings.Contains(msg, string(data))) {
				t.Fatalf("Decode(%q) refused it with %q", data, msg)
			}
			return
		}
		if !utf8.ValidString(got) || (bytes.HasPrefix(data, []byte("\xef\xbb\xbf")) && "\ufeff"+got != string(data)) {
			t.Fatalf("Decode(%q) = %q", data, got)
		}
	})
}

// TestReadRefusesAFileLargerThanAnySecret: an API key file is one line;
// a path to something larger (a log file by mistake, /dev/zero or
// /dev/urandom, which never end) is refused naming the limit once just
// past it has been read, not read until memory runs out.
func TestReadRefusesAFileLargerThanAnySecret(t *testing.T) {
	p := filepath.Join(t.TempDir(), "api.key")
	if err := os.WriteFile(p, []byte(strings.Repeat("k", MaxSecretFile+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(p); err == nil || !strings.Contains(err.Error(), "read "+p+": larger than 64 KiB") {
		// Without the bound, /dev/zero below would take the machine's memory.
		t.Fatalf("a file of %d bytes: %v; want it refused, naming the limit", MaxSecretFile+1, err)
	}
	if err := os.WriteFile(p, []byte(strings.Repeat("k", MaxSecretFile)), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := Read(p); err != nil || len(s) != MaxSecretFile {
		t.Errorf("a file of exactly %d bytes: %d bytes, %v; want it read", MaxSecretFile, len(s), err)
	}
	for _, dev := range []string{"/dev/zero", "/dev/urandom"} {
		if _, err := os.Stat(dev); err != nil {
			continue
		}
		if _, err := Read(dev); err == nil || !strings.Contains(err.Error(), "larger than 64 KiB") {
			t.Errorf("%s: %v; want it refused, naming the limit", dev, err)
		}
	}
}
