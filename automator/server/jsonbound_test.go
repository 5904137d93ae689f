package server_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/opsgate/opsgate/automator/server"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestJSONBodyBoundHoldsTheLargestCommand: the HTTP listener reads no
// more of a body than JSONBodyBound, so the largest command the limits
// allow, written as JSON that escapes every character it may (each byte
// of the script name, the arguments and the variables as \u003c, each '/'
// of the base64 stdin as \/) and indented, must fit in it: for the
// default limits and for others.
func TestJSONBodyBoundHoldsTheLargestCommand(t *testing.T) {
	for _, l := range []server.Limits{
		{MaxScriptName: 255, MaxArgs: 1024, MaxArgsBytes: 256 << 10, MaxEnv: 256, MaxEnvBytes: 64 << 10, MaxStdin: 1 << 20},
		{MaxScriptName: 10, MaxArgs: 5000, MaxArgsBytes: 5000, MaxEnv: 2000, MaxEnvBytes: 12000, MaxStdin: 7},
	} {
		args := make([]string, l.MaxArgs)
		for i := range args {
			args[i] = strings.Repeat("<", l.MaxArgsBytes/l.MaxArgs)
		}
		args[0] += strings.Repeat("<", l.MaxArgsBytes%l.MaxArgs)
		env := map[string]string{}
		n := 0
		for i := range l.MaxEnv {
			k := fmt.Sprintf("E%d", i)
			env[k] = ""
			n += len(k)
		}
		for k := range env {
			env[k] = strings.Repeat("<", (l.MaxEnvBytes-n)/l.MaxEnv)
		}
		stdin := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xff}, l.MaxStdin)) // all '/'
		body, err := json.MarshalIndent(map[string]any{
			"command": map[string]any{
				"script": strings.Repeat("<", l.MaxScriptName),
				"args":   args,
				"env":    env,
				"stdin":  json.RawMessage(`"` + strings.ReplaceAll(stdin, "/", `\/`) + `"`),
			},
			"timeout":         "86400s",
			"idempotency_key": strings.Repeat("<", 128),
		}, "", "    ")
		if err != nil {
			t.Fatal(err)
		}
		var req automatorv1.ExecuteRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			t.Fatal(err)
		}
		if c := req.GetCommand(); len(c.GetArgs()) != l.MaxArgs || len(c.GetEnv()) != l.MaxEnv || len(c.GetStdin()) != l.MaxStdin {
			t.Fatalf("the test's command has %d args, %d variables, %d bytes of stdin; want them at the limits %+v", len(c.GetArgs()), len(c.GetEnv()), len(c.GetStdin()), l)
		}
		if bound := l.JSONBodyBound(); int64(len(body)) > bound {
			t.Errorf("limits %+v: the largest command takes %d bytes of JSON, more than JSONBodyBound %d", l, len(body), bound)
		}
	}
}
