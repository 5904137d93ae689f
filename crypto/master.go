package crypto

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/opsgate/opsgate/internal/secretfile"
)

// MasterKey seals account keys at rest in the automator's database.
type MasterKey [32]byte

const (
	masterVersion   = 1
	masterHKDFInfo  = "opsgate master key v1"
	masterADContext = "opsgate master key v1"
	// version || key id || nonce || sealed 32-byte secret.
	sealedKeyLen = 1 + 4 + chacha20poly1305.NonceSizeX + 32 + chacha20poly1305.Overhead
	// maxMasterKeyFile bounds the read so a wrong path (a log, a device)
	// fails fast instead of being read whole.
	maxMasterKeyFile = 1024
)

// NewMasterKey returns a random master key.
func NewMasterKey() (MasterKey, error) {
	var m MasterKey
	if _, err := rand.Read(m[:]); err != nil {
		return MasterKey{}, fmt.Errorf("creating master key: reading random bytes: %w", err)
	}
	return m, nil
}

// SealKey encrypts an account key for storage. The blob is
// version (1) || key id (4, big endian) || nonce (24) || sealed secret + tag;
// the additional data binds the account name and key id so a row copied to
// another account, or relabelled with another id, does not open.
func (m MasterKey) SealKey(account string, k Key) ([]byte, error) {
	if k.ID == 0 {
		return nil, fmt.Errorf("sealing key for account %q: key id must be >= 1", account)
	}
	aead, err := newAEAD(m[:], masterHKDFInfo)
	if err != nil {
		return nil, fmt.Errorf("sealing key for account %q: %w", account, err)
	}
	blob := make([]byte, 5+chacha20poly1305.NonceSizeX, sealedKeyLen)
	blob[0] = masterVersion
	binary.BigEndian.PutUint32(blob[1:5], k.ID)
	nonce := blob[5:]
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("sealing key for account %q: reading random nonce: %w", account, err)
	}
	return aead.Seal(blob, nonce, k.Secret[:], masterAD(account, k.ID)), nil
}

// OpenKey reverses SealKey. Every failure wraps ErrOpen.
func (m MasterKey) OpenKey(account string, blob []byte) (Key, error) {
	if len(blob) != sealedKeyLen {
		return Key{}, fmt.Errorf("opening sealed key for account %q: blob is %d bytes, want %d: %w", account, len(blob), sealedKeyLen, ErrOpen)
	}
	if blob[0] != masterVersion {
		return Key{}, fmt.Errorf("opening sealed key for account %q: unknown format version %d: %w", account, blob[0], ErrOpen)
	}
	id := binary.BigEndian.Uint32(blob[1:5])
	if id == 0 {
		return Key{}, fmt.Errorf("opening sealed key for account %q: key id is 0: %w", account, ErrOpen)
	}
	aead, err := newAEAD(m[:], masterHKDFInfo)
	if err != nil {
		return Key{}, fmt.Errorf("opening sealed key for account %q: %w", account, err)
	}
	headerEnd := 5 + chacha20poly1305.NonceSizeX
	secret, err := aead.Open(nil, blob[5:headerEnd], blob[headerEnd:], masterAD(account, id))
	if err != nil {
		return Key{}, fmt.Errorf("opening sealed key %d for account %q: wrong master key, or blob altered or stored under another account: %w", id, account, ErrOpen)
	}
	k := Key{ID: id}
	copy(k.Secret[:], secret)
	return k, nil
}

func masterAD(account string, keyID uint32) []byte {
	var ad []byte
	ad = appendField(ad, []byte(masterADContext))
	ad = appendField(ad, []byte{masterVersion})
	ad = appendField(ad, []byte(account))
	ad = appendField(ad, binary.BigEndian.AppendUint32(nil, keyID))
	return ad
}

// WriteMasterKeyFile creates a new master key and writes it to path as
// standard base64 plus a newline, mode 0600. It refuses to overwrite an
// existing file because replacing a master key makes every stored account
// key unreadable.
func WriteMasterKeyFile(path string) (MasterKey, error) {
	m, err := NewMasterKey()
	if err != nil {
		return MasterKey{}, fmt.Errorf("writing master key file %q: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return MasterKey{}, fmt.Errorf("writing master key file %q: %w", path, err)
	}
	data := base64.StdEncoding.EncodeToString(m[:]) + "\n"
	_, err = f.WriteString(data)
	if err == nil {
		// Sync so a crash right after start-up cannot leave an empty file
		// while keys sealed under m are already in the database.
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// Remove the partial file we created so the next attempt can
		// succeed instead of tripping over O_EXCL or reading garbage.
		os.Remove(path)
		return MasterKey{}, fmt.Errorf("writing master key file %q: %w", path, err)
	}
	return m, nil
}

// ReadMasterKeyFile reads a file written by WriteMasterKeyFile. On unix it
// refuses files that group or others can access, since anyone who can read
// the master key can read every account key.
func ReadMasterKeyFile(path string) (MasterKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return MasterKey{}, fmt.Errorf("reading master key file %q: %w", path, err)
	}
	defer f.Close()
	// Stat the open file rather than the path so the checked file is the
	// one we read.
	info, err := f.Stat()
	if err != nil {
		return MasterKey{}, fmt.Errorf("reading master key file %q: %w", path, err)
	}
	if !info.Mode().IsRegular() {
		return MasterKey{}, fmt.Errorf("reading master key file %q: not a regular file", path)
	}
	// Windows has no unix permission bits; Go reports 0666 or 0444 there.
	if runtime.GOOS != "windows" && info.Mode().Perm()&0o077 != 0 {
		return MasterKey{}, fmt.Errorf("reading master key file %q: mode %04o lets group or others access it; run: chmod 600 %s", path, info.Mode().Perm(), path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxMasterKeyFile+1))
	if err != nil {
		return MasterKey{}, fmt.Errorf("reading master key file %q: %w", path, err)
	}
	m, err := ParseMasterKey(data)
	if err != nil {
		return MasterKey{}, fmt.Errorf("reading master key file %q: %w", path, err)
	}
	return m, nil
}

// ParseMasterKey parses the content of a master key file: standard base64
// of 32 bytes, surrounding whitespace ignored, in UTF-8 or in UTF-16 with a
// byte-order mark (secretfile.Text: a copy written back by Windows
// PowerShell 5's > or Out-File). Errors never quote the content.
func ParseMasterKey(data []byte) (MasterKey, error) {
	if len(data) > maxMasterKeyFile {
		return MasterKey{}, fmt.Errorf("larger than %d bytes, not a master key file", maxMasterKeyFile)
	}
	decoded, err := secretfile.Text(data)
	if err != nil {
		return MasterKey{}, fmt.Errorf("content is %w", err)
	}
	text := []byte(decoded)
	if len(text) == 0 {
		return MasterKey{}, errors.New("file is empty")
	}
	// One text per key: strict padding bits, and no line breaks inside
	// (which the decoder would skip).
	if bytes.ContainsAny(text, "\r\n") {
		return MasterKey{}, errors.New("content is not one line of standard base64")
	}
	raw := make([]byte, base64.StdEncoding.DecodedLen(len(text)))
	n, err := base64.StdEncoding.Strict().Decode(raw, text)
	if err != nil {
		// The decoder error gives only an offset, never the key material.
		return MasterKey{}, fmt.Errorf("content is not standard base64: %w", err)
	}
	var m MasterKey
	if n != len(m) {
		return MasterKey{}, fmt.Errorf("key is %d bytes, want %d", n, len(m))
	}
	copy(m[:], raw[:n])
	return m, nil
}
