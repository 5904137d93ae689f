package store

import (
	"fmt"
	"strconv"
	"strings"
)

// KeyIDsText is how both stores keep a list of key ids in a text column
// (instances.refused_key_ids): decimal, comma-separated ("1,2"); "" for
// none.
func KeyIDsText(ids []uint32) string {
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(uint64(id), 10))
	}
	return b.String()
}

// ParseKeyIDsText reads what KeyIDsText wrote; nil for "".
func ParseKeyIDsText(s string) ([]uint32, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	ids := make([]uint32, len(parts))
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("key ids %q: %w", s, err)
		}
		ids[i] = uint32(n)
	}
	return ids, nil
}
