// Package wiretest speaks raw HTTP/2 frames to a gRPC endpoint, for tests
// that check what the endpoint puts on the wire: the flow-control windows it
// announces, and whether data it receives draws a PING from it (grpc-go's
// bandwidth probe, sent only with dynamic windows).
package wiretest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/opsgate/opsgate/internal/grpcwire"
)

// Windows is what a peer announced.
type Windows struct {
	// Stream is the initial window of each stream (SETTINGS).
	Stream uint32
	// Conn is the connection's window (65,535 plus its first
	// connection-level WINDOW_UPDATE).
	Conn uint32
}

// probe is the payload of the last PING a check sends: the peer answers
// PINGs in the order it queued its frames, so every frame the peer meant to
// send on the data it received comes before this one's answer.
var probe = [8]byte{'o', 'p', 's', 'g', 'a', 't', 'e', '!'}

// opened is the payload of the PING that ReadWindows sends.
var opened = [8]byte{'w', 'i', 'n', 'd', 'o', 'w', 's', '?'}

// Want is what grpcwire's options announce.
var Want = Windows{Stream: grpcwire.StreamWindow, Conn: grpcwire.ConnWindow}

// CheckServer probes the gRPC server at the other end of c (ProbeServer)
// and fails t unless the server announces grpcwire's windows and sends no
// PING on receiving data.
func CheckServer(t testing.TB, c net.Conn) {
	t.Helper()
	c.SetDeadline(time.Now().Add(time.Minute))
	w, pinged, err := ProbeServer(c)
	if err != nil {
		t.Fatal(err)
	}
	if w != Want {
		t.Errorf("windows %+v, want %+v", w, Want)
	}
	if pinged {
		t.Error("the server sent a PING on receiving data: a bandwidth probe of dynamic windows")
	}
}

// ProbeServer opens an HTTP/2 connection over c to a gRPC server, sends a
// request with one empty message, and reports the windows the server
// announced and whether it sent a PING on receiving that data.
func ProbeServer(c net.Conn) (w Windows, pinged bool, err error) {
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		return w, false, err
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		return w, false, err
	}
	if w, err = ReadWindows(fr); err != nil {
		return w, false, err
	}
	if err := fr.WriteSettingsAck(); err != nil {
		return w, false, err
	}
	block := Headers(":method", "POST", ":scheme", "https", ":path", "/wiretest.Probe/Call", ":authority", "probe",
		"content-type", "application/grpc", "te", "trailers")
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndHeaders: true}); err != nil {
		return w, false, err
	}
	// One gRPC message of length 0: its 5-byte prefix.
	if err := fr.WriteData(1, true, make([]byte, 5)); err != nil {
		return w, false, err
	}
	pinged, err = PingedBeforeProbe(fr)
	return w, pinged, err
}

// ReadWindows reads the windows the peer announced when the connection
// opened: its SETTINGS, and the connection-level WINDOW_UPDATE grpc-go sends
// right after them when the window is larger than the default. A PING sent
// first bounds the wait: its answer comes after both.
func ReadWindows(fr *http2.Framer) (Windows, error) {
	w := Windows{Conn: 65535}
	settings := false
	err := untilAnswered(fr, opened, func(f http2.Frame) {
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() || settings {
				return
			}
			settings = true
			w.Stream = 65535
			if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
				w.Stream = v
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 && w.Conn == 65535 {
				w.Conn += f.Increment
			}
		}
	})
	if err == nil && !settings {
		err = errors.New("no SETTINGS before the PING's answer")
	}
	return w, err
}

// PingedBeforeProbe sends a PING and reads frames until its answer,
// reporting whether the peer sent a PING of its own first.
func PingedBeforeProbe(fr *http2.Framer) (bool, error) {
	pinged := false
	err := untilAnswered(fr, probe, func(f http2.Frame) {
		if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
			pinged = true
		}
	})
	return pinged, err
}

// untilAnswered sends a PING carrying data and passes every frame the peer
// sends before its answer to seen.
func untilAnswered(fr *http2.Framer, data [8]byte, seen func(http2.Frame)) error {
	if err := fr.WritePing(false, data); err != nil {
		return err
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return err
		}
		switch f := f.(type) {
		case *http2.PingFrame:
			if f.IsAck() && f.Data == data {
				return nil
			}
		case *http2.GoAwayFrame:
			return fmt.Errorf("GOAWAY %v before the PING's answer: %s", f.ErrCode, f.DebugData())
		}
		seen(f)
	}
}

// Headers encodes name, value pairs as one HPACK header block.
func Headers(pairs ...string) []byte {
	var b bytes.Buffer
	enc := hpack.NewEncoder(&b)
	for i := 0; i+1 < len(pairs); i += 2 {
		enc.WriteField(hpack.HeaderField{Name: pairs[i], Value: pairs[i+1]})
	}
	return b.Bytes()
}
