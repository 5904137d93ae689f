package runner

// capture is an io.Writer that keeps the first max bytes written to it and
// discards the rest, recording that it did. It never fails, so the copy from
// the script's pipe keeps draining and the script never blocks on a full
// pipe.
type capture struct {
	max       int
	buf       []byte
	truncated bool
}

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
