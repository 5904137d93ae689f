package crypto_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/opsgate/opsgate/crypto"
)

func mustMaster(t *testing.T) crypto.MasterKey {
	t.Helper()
	m, err := crypto.NewMasterKey()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestMasterSealOpenKey(t *testing.T) {
	m := mustMaster(t)
	k := mustKey(t, 9)
	blob, err := m.SealKey("acme", k)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(blob, k.Secret[:]) {
		t.Fatal("sealed key contains the secret in the clear")
	}
	got, err := m.OpenKey("acme", blob)
	if err != nil || got != k {
		t.Fatalf("OpenKey = %v, want the sealed key", err)
	}

	other := mustMaster(t)
	if m == other {
		t.Fatal("NewMasterKey returned the same key twice")
	}
	bad := map[string]func() (crypto.Key, error){
		"wrong account":    func() (crypto.Key, error) { return m.OpenKey("globex", blob) },
		"wrong master key": func() (crypto.Key, error) { return other.OpenKey("acme", blob) },
		"truncated":        func() (crypto.Key, error) { return m.OpenKey("acme", blob[:len(blob)-1]) },
		"empty":            func() (crypto.Key, error) { return m.OpenKey("acme", nil) },
	}
	for i := range blob {
		flipped := bytes.Clone(blob)
		flipped[i] ^= 0x80
		if _, err := m.OpenKey("acme", flipped); !errors.Is(err, crypto.ErrOpen) {
			t.Errorf("byte %d flipped: OpenKey error = %v, want ErrOpen", i, err)
		}
	}
	for name, open := range bad {
		if _, err := open(); !errors.Is(err, crypto.ErrOpen) {
			t.Errorf("%s: OpenKey error = %v, want ErrOpen", name, err)
		}
	}
	if _, err := m.SealKey("acme", crypto.Key{}); err == nil {
		t.Error("SealKey with key id 0 succeeded")
	}
}

func TestMasterKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "master.key")
	m, err := crypto.WriteMasterKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := base64.StdEncoding.EncodeToString(m[:]) + "\n"; string(data) != want {
		t.Fatalf("file content %q, want %q", data, want)
	}
	if runtime.GOOS != "windows" {
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if perm := info.Mode().Perm(); perm != 0o600 {
			t.Fatalf("file mode %04o, want 0600", perm)
		}
	}
	got, err := crypto.ReadMasterKeyFile(path)
	if err != nil || got != m {
		t.Fatalf("ReadMasterKeyFile = %v, want the written key", err)
	}

	if _, err := crypto.WriteMasterKeyFile(path); err == nil {
		t.Fatal("WriteMasterKeyFile overwrote an existing file")
	}
	if again, err := crypto.ReadMasterKeyFile(path); err != nil || again != m {
		t.Fatalf("key changed after refused overwrite: %v", err)
	}
}

func TestReadMasterKeyFileErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, perm os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		// Chmod after writing because the umask may strip bits from WriteFile.
		if err := os.Chmod(p, perm); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)) + "\n"
	cases := []struct {
		name, path, want string
	}{
		{"missing", filepath.Join(dir, "nope"), "no such file"},
		{"not base64", write("notb64", "this is not base64!\n", 0o600), "not standard base64"},
		{"url alphabet", write("url", strings.Repeat("_", 44), 0o600), "not standard base64"},
		{"short", write("short", base64.StdEncoding.EncodeToString(make([]byte, 16))+"\n", 0o600), "16 bytes, want 32"},
		{"long", write("long", base64.StdEncoding.EncodeToString(make([]byte, 33)), 0o600), "33 bytes, want 32"},
		{"empty", write("empty", "", 0o600), "empty"},
		{"huge", write("huge", strings.Repeat("A", 5000), 0o600), "larger than"},
		{"directory", dir, "not a regular file"},
	}
	if runtime.GOOS != "windows" {
		cases = append(cases,
			struct{ name, path, want string }{"mode 0644", write("open", good, 0o644), "chmod 600"},
			struct{ name, path, want string }{"mode 0640", write("group", good, 0o640), "chmod 600"},
		)
	}
	for _, c := range cases {
		_, err := crypto.ReadMasterKeyFile(c.path)
		if err == nil {
			t.Errorf("%s: ReadMasterKeyFile succeeded", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %q does not contain %q", c.name, err, c.want)
		}
		if !strings.Contains(err.Error(), c.path) {
			t.Errorf("%s: error %q does not name the file", c.name, err)
		}
	}
	// Control: the same content with mode 0600 reads fine, so the mode
	// cases above fail because of the mode alone.
	if _, err := crypto.ReadMasterKeyFile(write("ok", good, 0o600)); err != nil {
		t.Fatalf("good file: %v", err)
	}
}

// TestMasterKeyFileWrittenBackByPowerShellIsRead: a master key file copied
// back (from a backup, say) with Windows PowerShell 5's > is UTF-16 with a
// byte-order mark and CRLF; it holds the same key. Without the byte-order
// mark it is refused, naming the encoding.
func TestMasterKeyFileWrittenBackByPowerShellIsRead(t *testing.T) {
	var want crypto.MasterKey
	for i := range want {
		want[i] = byte(i)
	}
	text := base64.StdEncoding.EncodeToString(want[:]) + "\r\n"
	var le, be []byte
	for _, u := range utf16.Encode([]rune(text)) {
		le = append(le, byte(u), byte(u>>8))
		be = append(be, byte(u>>8), byte(u))
	}
	for name, data := range map[string][]byte{
		"UTF-16 LE with BOM": append([]byte{0xFF, 0xFE}, le...),
		"UTF-16 BE with BOM": append([]byte{0xFE, 0xFF}, be...),
		"UTF-8 with BOM":     []byte("\ufeff" + text),
	} {
		got, err := crypto.ParseMasterKey(data)
		if err != nil || got != want {
			t.Errorf("%s: ParseMasterKey: %v; want the key", name, err)
		}
	}
	if _, err := crypto.ParseMasterKey(le); err == nil || !strings.Contains(err.Error(), "UTF-16 without a byte-order mark") {
		t.Errorf("UTF-16 without a byte-order mark: ParseMasterKey: %v; want an error naming the encoding", err)
	}
}
