//go:build linux

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
)

// utf16File is text as Windows PowerShell 5's > writes it (little-endian)
// or as UTF-16 big-endian, each with its byte-order mark.
func utf16File(text string, bigEndian bool) []byte {
	b := []byte{0xFF, 0xFE}
	if bigEndian {
		b = []byte{0xFE, 0xFF}
	}
	for _, u := range utf16.Encode([]rune(text)) {
		if bigEndian {
			b = append(b, byte(u>>8), byte(u))
		} else {
			b = append(b, byte(u), byte(u>>8))
		}
	}
	return b
}

// TestAnAPIKeyFileWrittenByPowerShellIsRead: an --api-key-file (and the
// data directory's admin.apikey) in UTF-16 with a byte-order mark, as
// Windows PowerShell 5's `>` writes it, or in UTF-8 with one, with CRLF,
// holds the same key: the automator accepts it. UTF-16 without a
// byte-order mark, and a file holding more than a key, are refused with a
// line naming the file and what is wrong, not the gRPC library's words.
func TestAnAPIKeyFileWrittenByPowerShellIsRead(t *testing.T) {
	t.Parallel()
	s := serveInProcess(t)
	adminFile := filepath.Join(s.dir, config.FileAPIKey)
	raw, err := os.ReadFile(adminFile)
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(raw))
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		content []byte
	}{
		{"UTF-16 LE with BOM, CRLF", utf16File(key+"\r\n", false)},
		{"UTF-16 BE with BOM, CRLF", utf16File(key+"\r\n", true)},
		{"UTF-8 with BOM, CRLF", []byte("\ufeff" + key + "\r\n")},
		{"UTF-8, spaces around", []byte("  " + key + " \n\n")},
	} {
		f := filepath.Join(dir, "key")
		if err := os.WriteFile(f, tc.content, 0o600); err != nil {
			t.Fatal(err)
		}
		remote := []string{"--server", "https://" + s.grpc, "--api-key-file", f, "--ca", filepath.Join(s.dir, config.FileCACert)}
		if r := runCancel(t, append([]string{unknownID}, remote...)...); r.code != ExitSomeIDRefused || !strings.Contains(r.stderr, "no such unit") {
			t.Errorf("%s: work cancel of an unknown id: exit %d, stderr %q; want %d, the id refused as unknown (the key accepted)", tc.name, r.code, r.stderr, ExitSomeIDRefused)
		}
		// admin.apikey written over by PowerShell: --data-dir reads it, and
		// apikey revoke still knows it holds the admin key.
		if err := os.WriteFile(adminFile, tc.content, 0o600); err != nil {
			t.Fatal(err)
		}
		if r := s.cancelCLI(t, unknownID); r.code != ExitSomeIDRefused || !strings.Contains(r.stderr, "no such unit") {
			t.Errorf("%s as admin.apikey: work cancel --data-dir: exit %d, stderr %q; want %d, the key accepted", tc.name, r.code, r.stderr, ExitSomeIDRefused)
		}
		if !holdsKey(adminFile, store.APIKey{ID: "admin", Hash: crypto.HashToken(key)}) {
			t.Errorf("%s as admin.apikey: apikey revoke would not see that it holds the admin key", tc.name)
		}
	}

	for _, tc := range []struct {
		name    string
		content []byte
		want    string
	}{
		{"UTF-16 LE without BOM", utf16File(key, false)[2:], "is UTF-16 without a byte-order mark: save it as UTF-8"},
		{"two keys", []byte(key + "\n" + key + "\n"), "holds something other than one API key"},
	} {
		f := filepath.Join(dir, "bad")
		if err := os.WriteFile(f, tc.content, 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := runMain(t, "work", "cancel", unknownID, "--server", "https://"+s.grpc, "--api-key-file", f, "--ca", filepath.Join(s.dir, config.FileCACert))
		if code != ExitError || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "API key file "+f+" "+tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want %d and one line saying %q", tc.name, code, stderr, ExitError, tc.want)
		}
	}
}
