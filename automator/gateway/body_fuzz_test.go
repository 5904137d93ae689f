package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// FuzzRequestBody feeds arbitrary request bodies of execute and submit
// through the API's JSON decoding. A body is accepted only if it is one
// JSON value that protojson takes as the request; a refused one gets one
// line of error, of bounded length, that names the timeout when only the
// timeout is wrong.
func FuzzRequestBody(f *testing.F) {
	for _, seed := range []string{
		`{"command": {"script": "hello.sh", "args": ["world"]}, "timeout": "60s"}`,
		`{"command": {"script": "checksum.sh", "stdin": "c29tZSBkYXRhCg=="}, "idempotency_key": "deploy-1"}` + "\r\n",
		`{"command": {"script": "x"}, "timeout": "5m"}`,
		`{"command": {"script": "x"}, "timeout": 300}`,
		`{"command": {"script": "x"}, "timeout": null}`,
		`{"command": {"script": "x"}}}`,
		`{"command": {"script": "x"}} {}`,
		`{"command": {"script": "x"`,
		`{"command": {"script": "x"}, "unknown": "a` + "\\n" + `b"}`,
		`[]`,
		``,
	} {
		f.Add([]byte(seed))
	}
	m := jsonBody{JSONPb: &runtime.JSONPb{UnmarshalOptions: protojson.UnmarshalOptions{}}}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req automatorv1.ExecuteRequest
		err := m.NewDecoder(bytes.NewReader(body)).Decode(&req)
		if errors.Is(err, io.EOF) {
			if len(bytes.TrimSpace(body)) != 0 {
				t.Fatalf("body %q taken for an empty one", body)
			}
			return
		}
		if err == nil {
			var want automatorv1.ExecuteRequest
			if !json.Valid(body) || protojson.Unmarshal(body, &want) != nil || !proto.Equal(&req, &want) {
				t.Fatalf("body %q accepted as %v", body, &req)
			}
			return
		}
		msg := err.Error()
		if strings.ContainsAny(msg, "\r\n") {
			t.Fatalf("body %q refused in more than one line:\n%s", body, msg)
		}
		var fields map[string]json.RawMessage
		if json.Unmarshal(body, &fields) != nil || len(fields) != 1 {
			return
		}
		if v, ok := fields["timeout"]; ok && string(v) != "null" && protojson.Unmarshal(v, &durationpb.Duration{}) != nil {
			// The timeout is all the body holds, and it is wrong.
			if !strings.HasPrefix(msg, "timeout ") || len(msg) > 300 {
				t.Fatalf("body %q refused with %q, not an error of its timeout of bounded length", body, msg)
			}
		}
	})
}
