// Package prose writes lists as the project's messages say them.
package prose

import "strings"

// And is items as a sentence lists them: "a", "a and b", "a, b and c".
func And(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

// Some is up to n of items, comma separated, "…" after them when there
// are more.
func Some(items []string, n int) string {
	if len(items) > n {
		items = append(items[:n:n], "…")
	}
	return strings.Join(items, ", ")
}
