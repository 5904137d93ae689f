package store

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// NewWorkID returns a new unit's id: "w_" and 32 lowercase hex digits, of
// which the first 12 are the Unix time in milliseconds at t and the other
// 20 (80 bits) random.
//
// The id is the primary key of work, whose rows are never deleted. With
// ids in time order, units queued together land in the same few pages of
// its index, instead of each in a random page of an index that only grows:
// every commit writes each page it touched in full to the WAL, and a
// random page of a large index is seldom in the cache. The time is there
// for that locality, and `automator audit --work` reads it back (WorkIDTime)
// to know where to start for a unit the purge removed; nothing relies on
// the order.
func NewWorkID(t time.Time) string {
	var b [16]byte
	if _, err := rand.Read(b[6:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	ms := uint64(t.UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	return "w_" + hex.EncodeToString(b[:])
}

// WorkIDTime returns the time NewWorkID put in id, and false when id does
// not have its shape. The first releases made ids of the same shape at
// random: the time of such an id is meaningless, most often thousands of
// years ahead.
func WorkIDTime(id string) (time.Time, bool) {
	if !ValidWorkID(id) {
		return time.Time{}, false
	}
	ms, err := strconv.ParseUint(id[2:14], 16, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(int64(ms)), true
}

// ValidWorkID reports whether id has the shape NewWorkID gives, so a
// command line can tell a mistyped id from an unknown one.
func ValidWorkID(id string) bool {
	hexPart, ok := strings.CutPrefix(id, "w_")
	if !ok || len(hexPart) != 32 {
		return false
	}
	for _, c := range []byte(hexPart) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Text reports whether s can be stored or looked up as text by every
// store: UTF-8 holding no NUL byte. PostgreSQL refuses anything else in a
// text value, a query's parameter included, with an error that says
// nothing of whether a row matches: a lookup of such a value finds
// nothing, as it does in SQLite.
func Text(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}
