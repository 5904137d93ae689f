package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf16"
)

// TestAProfileWrittenByPowerShellIsRead: the proxy config (the profile
// `automator account create` prints, with the token and the key) saved by
// Windows PowerShell 5's `>` is UTF-16 little-endian with a byte-order
// mark and CRLF line ends; saved elsewhere it may be UTF-16 big-endian or
// UTF-8 with a byte-order mark. Each is read as the UTF-8 file is.
func TestAProfileWrittenByPowerShellIsRead(t *testing.T) {
	k := key(t, 1)
	profile := "automator_url: https://a.example:8443\ntoken: oat_secret\nkey: " + k + "\nscripts_dir: s\n"
	crlf := strings.ReplaceAll(profile, "\n", "\r\n")
	enc16 := func(s string, bigEndian bool) []byte {
		b := []byte{0xFF, 0xFE}
		if bigEndian {
			b = []byte{0xFE, 0xFF}
		}
		for _, u := range utf16.Encode([]rune(s)) {
			if bigEndian {
				b = append(b, byte(u>>8), byte(u))
			} else {
				b = append(b, byte(u), byte(u>>8))
			}
		}
		return b
	}
	for name, data := range map[string][]byte{
		"UTF-16 LE with BOM, CRLF": enc16(crlf, false),
		"UTF-16 BE with BOM, CRLF": enc16(crlf, true),
		"UTF-8 with BOM, CRLF":     []byte("\ufeff" + crlf),
	} {
		p := filepath.Join(t.TempDir(), "proxy.yaml")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load(p)
		if err != nil {
			t.Errorf("%s: Load: %v", name, err)
			continue
		}
		if c.AutomatorURL != "https://a.example:8443" || c.Token != "oat_secret" || c.Key != k || c.ScriptsDirWritten() != "s" {
			t.Errorf("%s: Load = url %q token %q scripts_dir %q, key matches %v; want the profile's values", name, c.AutomatorURL, c.Token, c.ScriptsDirWritten(), c.Key == k)
		}
		if _, err := c.Keys(); err != nil {
			t.Errorf("%s: key: %v", name, err)
		}
	}
	// Without its byte-order mark, UTF-16 is refused, saying so.
	p := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(p, enc16(crlf, false)[2:], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), p+": the file is UTF-16 without a byte-order mark: save it as UTF-8") {
		t.Errorf("UTF-16 without a byte-order mark: Load: %v; want an error naming the file and the encoding", err)
	}
}
