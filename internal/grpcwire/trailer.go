package grpcwire

// Keys of the trailer of ProxyService.Complete, which tells a proxy how its
// token stands (a Complete with no work_id authenticates and does nothing
// else: `proxy status` checks a profile with it).
const (
	// TrailerKeyID is the account's current key id, in decimal.
	TrailerKeyID = "opsgate-key-id"
	// TrailerTokenUntil is set when the call's token is a previous one
	// (rotated, within its overlap): when it stops being accepted, RFC 3339.
	TrailerTokenUntil = "opsgate-token-until"
	// TrailerKeyCheck is given once for each key the account has: its id
	// in decimal, a colon, and its key check (crypto.KeyCheck) in unpadded
	// standard base64. A proxy holding a key of one of those ids whose
	// check differs holds another account's key, or a mistyped one, and
	// its polls are refused.
	TrailerKeyCheck = "opsgate-key-check"
)

// HeaderStatusCheck, in the metadata of that Complete, says `proxy status`
// makes it to check a config (a stopped standby's, say), not a running
// proxy: the audit record of a token it presents that is refused says so.
// Its value is not read.
const HeaderStatusCheck = "opsgate-status-check"
