package runner

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// Write keeps what of p fits under c.max and drops the rest, as ReadFrom
// does with what it reads: the reference the tests hold ReadFrom to.
func (c *capture) Write(p []byte) (int, error) {
	keep := min(len(p), c.max-len(c.buf))
	if keep > 0 {
		c.buf = append(c.buf, p[:keep]...)
	}
	if keep < len(p) {
		c.truncated = true
	}
	return len(p), nil
}

func TestCaptureKeepsFirstBytesAndCountsTheRest(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
	for _, max := range []int{0, -1} {
		if got := (Limits{MaxOutput: max}).maxOutput(); got != DefaultMaxOutput {
			t.Errorf("MaxOutput %d: got %d, want %d", max, got, DefaultMaxOutput)
		}
	}
	if got := (Limits{MaxOutput: 7}).maxOutput(); got != 7 {
		t.Errorf("MaxOutput 7: got %d", got)
	}
}

// TestCaptureReadFromMatchesWrite: reading a stream straight into the
// capture keeps and drops exactly what writes of it would, whatever the
// reads' sizes.
func TestCaptureReadFromMatchesWrite(t *testing.T) {
	t.Parallel()
	data := bytes.Repeat([]byte("0123456789"), 1000) // 10,000 bytes
	readers := map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"halves":   iotest.HalfReader,
		"data+EOF": iotest.DataErrReader,
	}
	for _, max := range []int{1, 5, 511, 512, 513, 4096, 9999, 10000, 10001, 1 << 20} {
		for _, n := range []int{0, 1, 511, 512, 1000, 10000} {
			for name, wrap := range readers {
				want := capture{max: max}
				_, _ = want.Write(data[:n])
				got := capture{max: max}
				read, err := got.ReadFrom(wrap(bytes.NewReader(data[:n])))
				if err != nil || read != int64(n) || !bytes.Equal(got.buf, want.buf) || got.truncated != want.truncated {
					t.Fatalf("max %d, %d bytes, %s reads: read %d (%v), kept %d truncated=%v; want %d, kept %d truncated=%v",
						max, n, name, read, err, len(got.buf), got.truncated, n, len(want.buf), want.truncated)
				}
				if cap(got.buf) > max {
					t.Fatalf("max %d: buffer of %d bytes, more than the limit", max, cap(got.buf))
				}
			}
		}
	}
}

func TestCaptureReadFromReturnsReadErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	c := capture{max: 10}
	n, err := c.ReadFrom(io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(boom)))
	if n != 3 || !errors.Is(err, boom) || string(c.buf) != "abc" {
		t.Fatalf("ReadFrom = %d, %v, kept %q; want 3, boom, \"abc\"", n, err, c.buf)
	}
}
