package crypto

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
)

// tokenBytes gives 256 bits of entropy, enough that tokens cannot be guessed
// and that storing only a fast hash (no salt, no stretching) is safe.
const tokenBytes = 32

// NewToken returns prefix followed by 32 random bytes in unpadded base64url.
// The prefix lets humans and secret scanners recognise the token's kind.
func NewToken(prefix string) (string, error) {
	var b [tokenBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("creating token: reading random bytes: %w", err)
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// HashToken returns the SHA-256 of the token string, which is what servers
// store so that a database leak does not reveal usable tokens.
func HashToken(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// TokenEqual compares two token hashes in constant time. Empty inputs never
// match: subtle.ConstantTimeCompare reports two empty slices as equal, which
// would let a missing stored hash match a missing presented one.
func TokenEqual(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	return subtle.ConstantTimeCompare(a, b) == 1
}
