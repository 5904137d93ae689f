package crypto

import (
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"golang.org/x/crypto/chacha20poly1305"
)

// Direction says which way a sealed blob travels; it is bound into the additional data.
type Direction byte

const (
	DirCommand Direction = 1 // automator -> proxy
	DirResult  Direction = 2 // proxy -> automator
)

// String names the direction for error messages.
func (d Direction) String() string {
	switch d {
	case DirCommand:
		return "command"
	case DirResult:
		return "result"
	}
	return "Direction(" + strconv.Itoa(int(d)) + ")"
}

// hkdfInfo returns the HKDF info string for the direction, or "" if the
// direction is not one we know.
func (d Direction) hkdfInfo() string {
	switch d {
	case DirCommand:
		return "opsgate seal v1 command"
	case DirResult:
		return "opsgate seal v1 result"
	}
	return ""
}

// ErrOpen is wrapped by every failure to open a sealed blob, so callers can
// reject them alike without parsing messages.
var ErrOpen = errors.New("sealed blob did not open")

const (
	sealVersion   = 1
	sealADContext = "opsgate seal v1"
	headerLen     = 1 + 4 + chacha20poly1305.NonceSizeX
	minBlobLen    = headerLen + chacha20poly1305.Overhead
)

// Seal encrypts plaintext for one account, work id and direction. See the
// package documentation for the blob format and what is authenticated.
func Seal(k Key, account, workID string, dir Direction, plaintext []byte) ([]byte, error) {
	if k.ID == 0 {
		return nil, errors.New("sealing blob: key id must be >= 1")
	}
	aead, err := newAEAD(k.Secret[:], dir.hkdfInfo())
	if err != nil {
		return nil, fmt.Errorf("sealing blob: %w", err)
	}
	blob := make([]byte, headerLen, headerLen+len(plaintext)+aead.Overhead())
	blob[0] = sealVersion
	binary.BigEndian.PutUint32(blob[1:5], k.ID)
	nonce := blob[5:headerLen]
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("sealing blob: reading random nonce: %w", err)
	}
	ad := sealAD(sealVersion, k.ID, account, workID, dir)
	return aead.Seal(blob, nonce, plaintext, ad), nil
}

// Open reverses Seal, choosing the key by the id in the blob header. Every
// failure caused by the blob or the ring wraps ErrOpen; only an invalid dir
// (a caller bug, not a bad blob) does not.
func Open(ring KeyRing, account, workID string, dir Direction, blob []byte) ([]byte, error) {
	info := dir.hkdfInfo()
	if info == "" {
		return nil, fmt.Errorf("opening sealed blob: invalid direction %v", dir)
	}
	id, err := parseHeader(blob)
	if err != nil {
		return nil, fmt.Errorf("opening sealed blob: %w", err)
	}
	k, ok := ring.Key(id)
	if !ok {
		return nil, fmt.Errorf("opening sealed blob: unknown key id %d: %w", id, ErrOpen)
	}
	aead, err := newAEAD(k.Secret[:], info)
	if err != nil {
		return nil, fmt.Errorf("opening sealed blob with key id %d: %w", id, err)
	}
	// The ad uses the id from the header, not k.ID, so a ring that answers
	// with a mislabelled key still cannot make an altered header verify.
	ad := sealAD(blob[0], id, account, workID, dir)
	plaintext, err := aead.Open(nil, blob[5:headerLen], blob[headerLen:], ad)
	if err != nil {
		return nil, fmt.Errorf("opening sealed blob with key id %d: wrong key, or blob altered or bound to another account, work id or direction: %w", id, ErrOpen)
	}
	return plaintext, nil
}

// BlobKeyID returns the key id recorded in a blob's header, e.g. to report
// which key version a stored blob still needs.
func BlobKeyID(blob []byte) (uint32, error) {
	id, err := parseHeader(blob)
	if err != nil {
		return 0, fmt.Errorf("reading sealed blob key id: %w", err)
	}
	return id, nil
}

// parseHeader checks length and version and returns the key id. The key id
// is not authenticated until the AEAD verifies.
func parseHeader(blob []byte) (uint32, error) {
	if len(blob) < minBlobLen {
		return 0, fmt.Errorf("blob is %d bytes, shorter than the minimum %d: %w", len(blob), minBlobLen, ErrOpen)
	}
	if blob[0] != sealVersion {
		return 0, fmt.Errorf("unknown format version %d: %w", blob[0], ErrOpen)
	}
	return binary.BigEndian.Uint32(blob[1:5]), nil
}

// newAEAD derives a per-purpose key from secret so the raw secret is never
// used directly and distinct purposes never share an AEAD key. The AEAD of
// each (secret, purpose) is kept (aeads): deriving its key costs more than
// sealing a small command, and every unit seals and opens a few.
func newAEAD(secret []byte, info string) (cipher.AEAD, error) {
	if info == "" {
		return nil, errors.New("no key derivation info (invalid direction?)")
	}
	if len(secret) != 32 {
		return deriveAEAD(secret, info)
	}
	k := aeadKey{secret: [32]byte(secret), info: info}
	if a, ok := aeads.get(k); ok {
		return a, nil
	}
	a, err := deriveAEAD(secret, info)
	if err != nil {
		return nil, err
	}
	aeads.put(k, a)
	return a, nil
}

func deriveAEAD(secret []byte, info string) (cipher.AEAD, error) {
	key, err := hkdf.Key(sha256.New, secret, nil, info, chacha20poly1305.KeySize)
	if err != nil {
		return nil, fmt.Errorf("deriving key: %w", err)
	}
	aead, err := chacha20poly1305.NewX(key)
	if err != nil {
		return nil, fmt.Errorf("creating cipher: %w", err)
	}
	return aead, nil
}

// aeadKey names a derived AEAD by the secret itself (not its key id, which
// two different secrets may share) and the purpose.
type aeadKey struct {
	secret [32]byte
	info   string
}

// aeadCache holds derived AEADs (safe for concurrent use, as cipher.AEAD
// from chacha20poly1305 is). It is emptied when it reaches maxAEADs, so
// the secrets of rotated keys do not pile up in it.
type aeadCache struct {
	mu sync.RWMutex
	m  map[aeadKey]cipher.AEAD
}

// maxAEADs bounds aeads: two purposes for each account key in use, and
// the master key's.
const maxAEADs = 4096

var aeads = &aeadCache{m: make(map[aeadKey]cipher.AEAD)}

func (c *aeadCache) get(k aeadKey) (cipher.AEAD, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	a, ok := c.m[k]
	return a, ok
}

func (c *aeadCache) put(k aeadKey, a cipher.AEAD) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxAEADs {
		clear(c.m)
	}
	c.m[k] = a
}

func sealAD(version byte, keyID uint32, account, workID string, dir Direction) []byte {
	var ad []byte
	ad = appendField(ad, []byte(sealADContext))
	ad = appendField(ad, []byte{version})
	ad = appendField(ad, binary.BigEndian.AppendUint32(nil, keyID))
	ad = appendField(ad, []byte(account))
	ad = appendField(ad, []byte(workID))
	ad = appendField(ad, []byte{byte(dir)})
	return ad
}

// appendField writes a length prefix before the field so that concatenated
// fields can be split only one way; a uint64 prefix cannot overflow.
func appendField(b, field []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(field)))
	return append(b, field...)
}
