package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// jsonBody is the API's JSON marshaler, whose request bodies are held to
// one JSON value and tell a caller what is wrong with them: grpc-gateway
// answers a body cut short with json's bare "unexpected EOF", which says
// nothing of the body, and decodes the first value of a body while
// ignoring whatever follows it, so `{...}}` would be run as `{...}`.
type jsonBody struct {
	*runtime.JSONPb
	// limitNote says what the body's limit is, after its size.
	limitNote string
}

func (m jsonBody) NewDecoder(r io.Reader) runtime.Decoder {
	// A UTF-8 byte-order mark before the JSON (Windows PowerShell 5 writes
	// one to a file) is skipped, as RFC 8259 8.1 lets a parser: it was
	// refused as "invalid character 'ï'" (a review).
	br := bufio.NewReader(r)
	if b, _ := br.Peek(len(utf8BOM)); bytes.Equal(b, utf8BOM) {
		_, _ = br.Discard(len(utf8BOM))
	}
	return bodyDecoder{r: br, dec: json.NewDecoder(br), opts: m.JSONPb, limitNote: m.limitNote}
}

// utf8BOM is the UTF-8 encoding of U+FEFF, the byte-order mark.
var utf8BOM = []byte{0xef, 0xbb, 0xbf}

type bodyDecoder struct {
	r         io.Reader
	dec       *json.Decoder
	opts      *runtime.JSONPb
	limitNote string
}

// Decode decodes the request body into v. An empty body is io.EOF, which
// the handlers take for an empty request.
func (d bodyDecoder) Decode(v any) error {
	var raw json.RawMessage
	err := d.dec.Decode(&raw)
	if err == nil {
		err = d.end()
	}
	if err == nil {
		err = noLoneSurrogate(raw)
	}
	if err == nil {
		if m, ok := v.(proto.Message); ok {
			err = d.opts.UnmarshalOptions.Unmarshal(raw, m) // as runtime.DecoderWrapper does
		} else {
			err = runtime.DecoderWrapper{Decoder: json.NewDecoder(bytes.NewReader(raw)), UnmarshalOptions: d.opts.UnmarshalOptions}.Decode(v)
		}
		if _, ok := v.(*automatorv1.ExecuteRequest); ok && err != nil {
			err = badTimeout(raw, err)
		}
	}
	var syntax *json.SyntaxError
	var tooLarge *http.MaxBytesError
	var netErr net.Error
	switch {
	case errors.As(err, &tooLarge):
		return fmt.Errorf("the request body is larger than the limit of %s%s", size(tooLarge.Limit), d.limitNote)
	case errors.As(err, &netErr) && netErr.Timeout():
		// The HTTP server's read deadline passed with the body still
		// coming: the socket's "read tcp ADDR->ADDR: i/o timeout" names
		// neither the body nor what ran out.
		return errors.New("the request body did not arrive whole within the time the automator gives a request to arrive: send it whole, faster")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("the request body is not complete JSON: it ends in the middle of a value")
	case errors.As(err, &syntax):
		return fmt.Errorf("the request body is not valid JSON: %v (at byte %d)", err, syntax.Offset)
	case err != nil && len(err.Error()) > maxDecodeError:
		// protojson quotes the value it refuses whole (a stdin of
		// megabytes that is not base64, an unknown field's name): the
		// answer says what is wrong, not the value again.
		msg := err.Error()
		n := maxDecodeError
		for n > 0 && !utf8.RuneStart(msg[n]) {
			n--
		}
		return fmt.Errorf("%s... (cut at %d of its %d bytes)", msg[:n], n, len(msg))
	}
	return err
}

// noLoneSurrogate refuses a string of the JSON value raw that holds half
// of a UTF-16 surrogate pair (a "\ud800" escape without its other half),
// which is no character and has no UTF-8: protojson answers it "proto:
// unexpected EOF", which says the body was cut short.
func noLoneSurrogate(raw []byte) error {
	in := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case !in:
			in = c == '"'
		case c == '"':
			in = false
		case c == '\\' && i+1 < len(raw) && raw[i+1] == 'u':
			r := hex4(raw, i+2)
			switch {
			case !utf16.IsSurrogate(r):
				i += 5
			case r < 0xdc00 && i+11 < len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' && hex4(raw, i+8) >= 0xdc00 && hex4(raw, i+8) <= 0xdfff:
				i += 11 // a whole pair
			default:
				return fmt.Errorf("the request body holds %s at byte %d, half of a UTF-16 surrogate pair without its other half, which is no character (invalid UTF-8 in string): text is UTF-8, and bytes that are not go on stdin", raw[i:i+6], i+1)
			}
		case c == '\\':
			i++ // the escaped character
		}
	}
	return nil
}

// hex4 is the value of the 4 hexadecimal digits at raw[i:], or -1.
func hex4(raw []byte, i int) rune {
	if i+4 > len(raw) {
		return -1
	}
	n, err := strconv.ParseUint(string(raw[i:i+4]), 16, 16)
	if err != nil {
		return -1
	}
	return rune(n)
}

// maxDecodeError bounds the error a body that does not decode is answered
// with.
const maxDecodeError = 200

// badTimeout names the timeout when it is what an execute or submit body
// holds wrong, and says how to write one: protojson's error names neither
// the field nor the form (`invalid google.protobuf.Duration value "5m"`),
// and "5m" is what the CLI's --timeout takes. Else it returns err.
func badTimeout(body []byte, err error) error {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return err
	}
	t, ok := fields["timeout"]
	if !ok || string(t) == "null" || protojson.Unmarshal(t, &durationpb.Duration{}) == nil {
		return err
	}
	return fmt.Errorf("timeout %s is not a valid duration: write it as a string of seconds ending in \"s\", such as \"300s\" or \"1.5s\", of at most 24 hours", shown(t))
}

// maxShown bounds how much of a wrong value an error quotes.
const maxShown = 40

// shown is a JSON value as an error quotes it: on one line (a value may
// span several in the body), cut after maxShown bytes.
func shown(v json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return "(not JSON)" // not reached: v was decoded
	}
	s := b.String()
	if len(s) <= maxShown {
		return s
	}
	n := maxShown
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// end checks that only white space follows the value decoded. It scans
// what follows a chunk at a time: a body may be padded with white space
// up to its limit (16 MiB), which a read per byte takes some 20 times as
// long to go through (over 100 ms; seconds under the race detector).
func (d bodyDecoder) end() error {
	at := d.dec.InputOffset()
	rest := io.MultiReader(d.dec.Buffered(), d.r)
	buf := make([]byte, 32<<10)
	for {
		n, err := rest.Read(buf)
		for _, c := range buf[:n] {
			at++
			if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
				return fmt.Errorf("the request body is not valid JSON: %q follows its value (at byte %d); send one JSON object", c, at)
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// size says n bytes in MiB when it is a whole number of them.
func size(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
