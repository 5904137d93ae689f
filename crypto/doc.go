// Package crypto seals the messages exchanged between an automator and a
// proxy, and manages the secrets those seals depend on.
//
// # Model
//
// Each account has a Key: a 32-byte secret plus a key id (>= 1) that grows
// with every rotation. The automator seals commands for an account and the
// proxy opens them; the proxy seals results and the automator opens them.
// During a rotation a proxy may hold several key versions, so a blob names
// the key id it was sealed under and Open looks that id up in a KeyRing.
//
// # Blob format (version 1)
//
//	offset  size  field
//	0       1     format version, always 1
//	1       4     key id, big endian
//	5       24    random XChaCha20-Poly1305 nonce
//	29      n+16  ciphertext followed by the Poly1305 tag
//
// The nonce is random rather than a counter because neither side keeps state
// about what it has sealed, and XChaCha20's 192-bit nonce makes random
// collisions negligible.
//
// # Per-purpose keys
//
// The account secret is never used as an AEAD key directly. Seal derives a
// separate key with HKDF-SHA256 (no salt) for each direction, with info
// "opsgate seal v1 command" or "opsgate seal v1 result". A result blob can
// therefore never be confused with a command blob even if the additional
// data were somehow equal, and the master key uses its own info string
// ("opsgate master key v1") so it never shares a derived key with sealing.
// KeyCheck, which shows that a proxy holds an account's key of a key id,
// derives its HMAC key with info "opsgate key check v1".
//
// # Additional data
//
// The additional data (authenticated, not transmitted) is the concatenation
// of these fields, each preceded by its length as an 8-byte big-endian
// integer:
//
//	"opsgate seal v1"     fixed context string
//	version               1 byte
//	key id                4 bytes, big endian
//	account               UTF-8 bytes as given
//	work id               UTF-8 bytes as given
//	direction             1 byte: 1 = command, 2 = result
//
// Length prefixes make the encoding injective: ("ab", "c") and ("a", "bc")
// give different bytes. Binding these values means a blob only opens for the
// exact account, work id and direction it was sealed for, so a captured blob
// cannot be replayed into another account, another piece of work or back
// in the opposite direction. Binding the version and key id means the
// cleartext header cannot be altered without detection either.
//
// Every failure to open a blob (too short, unknown version, unknown key id,
// authentication failure) wraps ErrOpen, so callers can treat them alike
// with errors.Is while the message still says what went wrong.
//
// # Tokens and the master key
//
// Tokens are 256-bit random values; servers store only their SHA-256 and
// find a presented token by its hash, so the whole token must match (a
// lookup's timing tells only of the hash of the presented guess, not of
// a stored token; TokenEqual compares two hashes in constant time where
// code holds both). The MasterKey seals account keys at rest
// in the automator's database, binding the account name and key id so that
// a row copied to another account does not open.
package crypto
