package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
)

// jsonBody is the API's JSON marshaler, whose request bodies tell a caller
// what is wrong with them: grpc-gateway answers a body cut short with
// json's bare "unexpected EOF", which says nothing of the body.
type jsonBody struct {
	*runtime.JSONPb
}

func (m jsonBody) NewDecoder(r io.Reader) runtime.Decoder {
	return bodyDecoder{dec: m.JSONPb.NewDecoder(r)}
}

type bodyDecoder struct {
	dec runtime.Decoder
}

// Decode decodes the request body into v. An empty body is io.EOF, which
// the handlers take for an empty request.
func (d bodyDecoder) Decode(v any) error {
	err := d.dec.Decode(v)
	var syntax *json.SyntaxError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("the request body is not complete JSON: it ends in the middle of a value")
	case errors.As(err, &syntax):
		return fmt.Errorf("the request body is not valid JSON: %v (at byte %d)", err, syntax.Offset)
	}
	return err
}
