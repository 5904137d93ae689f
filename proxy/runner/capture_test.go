package runner

import (
	"bytes"
	"testing"
)

func TestCaptureKeepsFirstBytesAndCountsTheRest(t *testing.T) {
	for _, tc := range []struct {
		name      string
		writes    []string
		want      string
		truncated bool
	}{
		{"under", []string{"hel"}, "hel", false},
		{"exactly", []string{"hel", "lo"}, "hello", false},
		{"over in one write", []string{"hello!"}, "hello", true},
		{"over across writes", []string{"hell", "o", "!"}, "hello", true},
		{"nothing", nil, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := capture{max: 5}
			for _, w := range tc.writes {
				if n, err := c.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v; want %d, nil", w, n, err, len(w))
				}
			}
			if !bytes.Equal(c.buf, []byte(tc.want)) || c.truncated != tc.truncated {
				t.Errorf("kept %q truncated=%v, want %q truncated=%v", c.buf, c.truncated, tc.want, tc.truncated)
			}
		})
	}
}

func TestLimitsDefault(t *testing.T) {
	for _, max := range []int{0, -1} {
		if got := (Limits{MaxOutput: max}).maxOutput(); got != DefaultMaxOutput {
			t.Errorf("MaxOutput %d: got %d, want %d", max, got, DefaultMaxOutput)
		}
	}
	if got := (Limits{MaxOutput: 7}).maxOutput(); got != 7 {
		t.Errorf("MaxOutput 7: got %d", got)
	}
}
