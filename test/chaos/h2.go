package chaos

import (
	"encoding/binary"
	"strings"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// HTTP/2 framing, as much as the relay needs (RFC 9113).
const (
	frameHeaderLen = 9
	frameData      = 0x0
	frameHeaders   = 0x1
	frameCont      = 0x9

	flagEndStream  = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20

	// maxFrame bounds a frame the parser holds; anything larger means it
	// lost track, and it relays the rest of the connection untouched.
	maxFrame = 1 << 20
)

// clientPreface opens every HTTP/2 connection from the client.
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// h2parser follows one direction of a cleartext HTTP/2 connection frame by
// frame. From the client it learns each stream's :path (decoding every
// header block, so the HPACK table stays in step) and the units a Complete
// or CompleteBatch posts; from the server it recognises Poll responses
// carrying claims and the answers to those posts. It hands back whole
// frames to forward, and, when an armed cut matches a frame, the part of it
// to let through.
type h2parser struct {
	l        *link
	toServer bool
	preface  int // bytes of the client preface still to pass
	buf      []byte
	lost     bool // framing lost: relay bytes untouched
	dec      *hpack.Decoder
	hdrID    uint32 // stream of a header block continued in CONTINUATION frames
	hdrBlock []byte
}

func newH2Parser(l *link, toServer bool) *h2parser {
	p := &h2parser{l: l, toServer: toServer}
	if toServer {
		p.preface = len(clientPreface)
		p.dec = hpack.NewDecoder(4096, nil)
	}
	return p
}

// feed takes the next bytes of the direction and returns those to forward
// now. A non-nil cut means the connection must be reset after out is sent.
func (p *h2parser) feed(data []byte) (out []byte, cut *Cut) {
	if p.lost {
		return data, nil
	}
	if p.preface > 0 {
		n := min(p.preface, len(data))
		out = append(out, data[:n]...)
		p.preface -= n
		data = data[n:]
	}
	p.buf = append(p.buf, data...)
	for len(p.buf) >= frameHeaderLen {
		length := int(p.buf[0])<<16 | int(p.buf[1])<<8 | int(p.buf[2])
		if length > maxFrame {
			p.lost = true
			out = append(out, p.buf...)
			p.buf = nil
			return out, nil
		}
		total := frameHeaderLen + length
		if len(p.buf) < total {
			break
		}
		frame := p.buf[:total]
		keep, c := p.frame(frame)
		out = append(out, frame[:keep]...)
		if c != nil {
			p.buf = nil
			return out, c
		}
		p.buf = p.buf[total:]
	}
	// Keep the incomplete frame in a buffer of its own.
	p.buf = append([]byte(nil), p.buf...)
	return out, nil
}

// frame looks at one whole frame and returns how many of its bytes to
// forward (all, unless a cut is taken) and the cut.
func (p *h2parser) frame(f []byte) (keep int, cut *Cut) {
	typ, flags := f[3], f[4]
	id := binary.BigEndian.Uint32(f[5:9]) & 0x7fffffff
	payload := f[frameHeaderLen:]
	r := p.l.r
	if p.toServer {
		switch typ {
		case frameHeaders:
			p.hdrID, p.hdrBlock = id, append(p.hdrBlock[:0], headerFragment(flags, payload)...)
			if flags&flagEndHeaders != 0 {
				p.headerBlock()
			}
		case frameCont:
			p.hdrBlock = append(p.hdrBlock, payload...)
			if flags&flagEndHeaders != 0 {
				p.headerBlock()
			}
		case frameData:
			s := p.l.stream(id)
			if !isComplete(s.path) {
				break
			}
			// A request may span DATA frames: the units it posts are known
			// once the whole message has passed, and a cut is taken
			// halfway through its last frame, so the automator never reads
			// the request whole.
			body := append(s.body, framePayload(flags, payload)...)
			ids, whole := completeWorkIDs(s.path, body)
			p.l.update(id, func(s *stream) {
				s.body = body
				if whole {
					s.body, s.workIDs = nil, ids
				}
			})
			if whole && r.take(CutCompleteRequest) {
				return frameHeaderLen + len(payload)/2, &Cut{Kind: CutCompleteRequest, WorkIDs: ids}
			}
		}
		return len(f), nil
	}
	switch typ {
	case frameHeaders:
		s := p.l.stream(id)
		if isComplete(s.path) && r.take(CutCompleteResponse) {
			return 0, &Cut{Kind: CutCompleteResponse, WorkIDs: s.workIDs}
		}
		if flags&flagEndStream != 0 {
			p.l.forget(id) // the trailers: the call is over
		}
	case frameData:
		s := p.l.stream(id)
		switch s.path {
		case automatorv1.AutomatorService_Wait_FullMethodName, automatorv1.AutomatorService_Submit_FullMethodName:
			var st automatorv1.WorkStatus
			if !grpcMessage(flags, payload, &st) {
				break
			}
			kind := CutSubmitResponse
			if s.path == automatorv1.AutomatorService_Wait_FullMethodName {
				kind = CutWaitResponse
				if !terminal(stateName(st.GetState())) {
					break
				}
			}
			if r.take(kind) {
				return frameHeaderLen + len(payload)/2, &Cut{Kind: kind, WorkIDs: []string{st.GetWorkId()}, State: stateName(st.GetState())}
			}
		}
		if s.path != automatorv1.ProxyService_Poll_FullMethodName {
			break
		}
		var resp automatorv1.PollResponse
		if !grpcMessage(flags, payload, &resp) || len(resp.GetClaims()) == 0 {
			break
		}
		if r.take(CutPollResponse) {
			ids := make([]string, 0, len(resp.GetClaims()))
			for _, c := range resp.GetClaims() {
				ids = append(ids, c.GetWorkId())
			}
			return frameHeaderLen + len(payload)/2, &Cut{Kind: CutPollResponse, WorkIDs: ids}
		}
	}
	return len(f), nil
}

// headerBlock decodes a complete header block from the client and records
// its stream's :path.
func (p *h2parser) headerBlock() {
	fields, err := p.dec.DecodeFull(p.hdrBlock)
	p.hdrBlock = p.hdrBlock[:0]
	if err != nil {
		return
	}
	for _, hf := range fields {
		if hf.Name == ":path" {
			p.l.update(p.hdrID, func(s *stream) { s.path = hf.Value })
		}
	}
}

// headerFragment strips a HEADERS frame's padding and priority fields.
func headerFragment(flags byte, payload []byte) []byte {
	pad := 0
	if flags&flagPadded != 0 {
		if len(payload) < 1 {
			return nil
		}
		pad = int(payload[0])
		payload = payload[1:]
	}
	if flags&flagPriority != 0 {
		if len(payload) < 5 {
			return nil
		}
		payload = payload[5:]
	}
	if pad > len(payload) {
		return nil
	}
	return payload[:len(payload)-pad]
}

// grpcMessage decodes the one uncompressed gRPC message a DATA frame holds.
func grpcMessage(flags byte, payload []byte, m proto.Message) bool {
	return grpcBody(framePayload(flags, payload), m)
}

// framePayload strips a DATA frame's padding (nil when it is malformed).
func framePayload(flags byte, payload []byte) []byte {
	if flags&flagPadded != 0 {
		if len(payload) < 1 || int(payload[0]) > len(payload)-1 {
			return nil
		}
		payload = payload[1 : len(payload)-int(payload[0])]
	}
	return payload
}

// grpcBody decodes body when it is exactly one whole uncompressed gRPC
// message.
func grpcBody(body []byte, m proto.Message) bool {
	if len(body) < 5 || body[0] != 0 {
		return false
	}
	n := binary.BigEndian.Uint32(body[1:5])
	if int(n) != len(body)-5 {
		return false
	}
	return proto.Unmarshal(body[5:], m) == nil
}

// isComplete: path is one of the calls that post results.
func isComplete(path string) bool {
	return path == automatorv1.ProxyService_Complete_FullMethodName || path == automatorv1.ProxyService_CompleteBatch_FullMethodName
}

// completeWorkIDs returns the units whose results body posts, once body is
// the whole request of a Complete or CompleteBatch call at path.
func completeWorkIDs(path string, body []byte) (ids []string, whole bool) {
	if path == automatorv1.ProxyService_CompleteBatch_FullMethodName {
		var req automatorv1.CompleteBatchRequest
		if !grpcBody(body, &req) {
			return nil, false
		}
		for _, r := range req.GetResults() {
			ids = append(ids, r.GetWorkId())
		}
		return ids, true
	}
	var req automatorv1.CompleteRequest
	if !grpcBody(body, &req) {
		return nil, false
	}
	return []string{req.GetWorkId()}, true
}

// stateName is a state as the history names it: the enum's name without
// its prefix, in lower case (STATE_TIMED_OUT is "timed_out").
func stateName(s automatorv1.State) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "STATE_"))
}
