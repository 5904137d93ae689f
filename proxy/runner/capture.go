package runner

import (
	"errors"
	"io"
	"sync"
)

// capture keeps the first max bytes of a script's output stream and
// discards the rest, recording that it did. The stream is read into it by
// ReadFrom, which reads the script's pipe to its end whatever the limit, so
// the script never blocks on a full pipe.
type capture struct {
	max       int
	buf       []byte
	truncated bool
}

// minRead is the room a read into the capture gets at least, and the first
// buffer's size: most scripts print a few lines.
const minRead = 512

// discardBufs are the scratch buffers that output past the limit is read
// into and dropped.
var discardBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// ReadFrom reads r to its end (or first error) straight into the kept
// bytes, growing them as needed up to max, and reads what comes past max
// into a shared scratch buffer. Unlike io.Copy it needs no 32 KiB buffer per
// stream. A read error ends the stream and is returned, except io.EOF.
func (c *capture) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	for {
		var n int
		var err error
		if room := c.max - len(c.buf); room > 0 {
			if cap(c.buf)-len(c.buf) < min(minRead, room) {
				grown := make([]byte, len(c.buf), min(c.max, max(2*cap(c.buf), len(c.buf)+minRead)))
				copy(grown, c.buf)
				c.buf = grown
			}
			n, err = r.Read(c.buf[len(c.buf):min(cap(c.buf), c.max)])
			c.buf = c.buf[:len(c.buf)+n]
		} else {
			bp := discardBufs.Get().(*[]byte)
			n, err = r.Read(*bp)
			discardBufs.Put(bp)
			if n > 0 {
				c.truncated = true
			}
		}
		total += int64(n)
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}
