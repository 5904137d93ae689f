package gateway_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/internal/waittest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// api is an HTTP caller of one automator.
type api struct {
	t      *testing.T
	base   string
	apiKey string
	// within, when set, is how long a request may take instead of
	// waittest.Bound: for a request whose own work (megabytes decoded and
	// encoded under the race detector) can take that long on a loaded
	// machine.
	within time.Duration
}

type response struct {
	status int
	header http.Header
	body   map[string]any
	raw    []byte
}

// do sends one request with the API key (unless key is "-") and decodes
// the JSON answer.
func (a api) do(method, path, key string, body any) response {
	a.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			a.t.Fatal(err)
		}
		r = bytes.NewReader(buf)
	}
	var ctx context.Context
	if a.within != 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(a.t.Context(), a.within)
		defer cancel()
	} else {
		ctx = waittest.Context(a.t, method+" "+path+" to answer")
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, r)
	if err != nil {
		a.t.Fatal(err)
	}
	if key == "" {
		key = a.apiKey
	}
	if key != "-" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatal(err)
	}
	out := response{status: resp.StatusCode, header: resp.Header, raw: raw}
	if err := json.Unmarshal(raw, &out.body); err != nil {
		a.t.Fatalf("%s %s: answer is not a JSON object: %v\n%s", method, path, err, raw)
	}
	return out
}

func (r response) str(path ...string) string {
	var v any = r.body
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = m[p]
	}
	s, _ := v.(string)
	return s
}

func (r response) b64(t *testing.T, path ...string) string {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(r.str(path...))
	if err != nil {
		t.Fatalf("%v is not base64: %v", path, err)
	}
	return string(b)
}

func (r response) want(t *testing.T, status int, state string) {
	t.Helper()
	if r.status != status || (state != "" && r.str("state") != state) {
		t.Fatalf("HTTP %d state %q, want %d %q:\n%s", r.status, r.str("state"), status, state, r.raw)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
}

func start(t *testing.T) (*automatortest.Automator, api, string) {
	a := automatortest.Start(t, automatortest.Options{})
	scripts := t.TempDir()
	automatortest.WriteScript(t, scripts, "hello.sh", `echo "hello ${1:-world} from $PROXY_INSTANCE_ID"`)
	automatortest.WriteScript(t, scripts, "checksum.sh", `sha256sum | cut -d' ' -f1`)
	automatortest.WriteScript(t, scripts, "exit.sh", `echo "exiting $1" >&2; exit "$1"`)
	automatortest.WriteScript(t, scripts, "sleeper.sh", `echo started > "$1"; exec sleep 60`)
	a.StartProxy(t, automatortest.ProxyOptions{InstanceID: "a", ScriptsDir: scripts, MaxConcurrency: 8}).WaitPolling(t)
	return a, api{t: t, base: a.HTTPURL, apiKey: a.APIKey}, scripts
}

// TestEveryEndpoint drives each route of the HTTP/JSON API with net/http
// against a real automator and proxy, checking status codes and bodies.
func TestEveryEndpoint(t *testing.T) {
	a, c, _ := start(t)

	t.Run("execute succeeded: 200 with outputs in base64", func(t *testing.T) {
		r := c.do("POST", "/v1/accounts/acme/execute", "", map[string]any{
			"command": map[string]any{"script": "exit.sh", "args": []string{"0"}}, "timeout": "30s",
		})
		r.want(t, http.StatusOK, "STATE_SUCCEEDED")
		if got := r.b64(t, "result", "stderr"); got != "exiting 0\n" {
			t.Errorf("stderr %q", got)
		}
		res := r.body["result"].(map[string]any)
		if code, ok := res["exit_code"]; !ok || code != float64(0) {
			t.Errorf("exit_code %v (present: %v), want 0 spelled out", code, ok)
		}
		if r.str("result", "instance_id") != "a" || r.str("instance_id") != "a" || !strings.HasPrefix(r.str("work_id"), "w_") {
			t.Errorf("body lacks the instance or work id:\n%s", r.raw)
		}
	})

	t.Run("execute with stdin in base64", func(t *testing.T) {
		in := []byte("some data\n")
		r := c.do("POST", "/v1/accounts/acme/execute", "", map[string]any{
			"command": map[string]any{"script": "checksum.sh", "stdin": base64.StdEncoding.EncodeToString(in)},
		})
		r.want(t, http.StatusOK, "STATE_SUCCEEDED")
		sum := sha256.Sum256(in)
		if got := r.b64(t, "result", "stdout"); got != hex.EncodeToString(sum[:])+"\n" {
			t.Errorf("checksum %q of stdin, want %x", got, sum)
		}
	})

	t.Run("execute of a remote exit code is still 200", func(t *testing.T) {
		r := c.do("POST", "/v1/accounts/acme/execute", "", map[string]any{"command": map[string]any{"script": "exit.sh", "args": []string{"42"}}})
		r.want(t, http.StatusOK, "STATE_SUCCEEDED")
		if code := r.body["result"].(map[string]any)["exit_code"]; code != float64(42) {
			t.Errorf("exit_code %v, want 42", code)
		}
	})

	t.Run("execute failed: 502", func(t *testing.T) {
		r := c.do("POST", "/v1/accounts/acme/execute", "", map[string]any{"command": map[string]any{"script": "not-deployed.sh"}})
		r.want(t, http.StatusBadGateway, "STATE_FAILED")
		if !strings.Contains(r.str("reason"), "not-deployed.sh") {
			t.Errorf("reason %q does not name the script", r.str("reason"))
		}
	})

	t.Run("execute timed out: 504", func(t *testing.T) {
		pid := filepath.Join(t.TempDir(), "started")
		r := c.do("POST", "/v1/accounts/acme/execute", "", map[string]any{
			"command": map[string]any{"script": "sleeper.sh", "args": []string{pid}}, "timeout": "1s",
		})
		r.want(t, http.StatusGatewayTimeout, "STATE_TIMED_OUT")
	})

	t.Run("execute cancelled: 409; cancel; submit with a used key", func(t *testing.T) {
		started := filepath.Join(t.TempDir(), "started")
		req := map[string]any{
			"command":         map[string]any{"script": "sleeper.sh", "args": []string{started}},
			"timeout":         "60s",
			"idempotency_key": "cancel-me",
		}
		done := make(chan response, 1)
		go func() { done <- c.do("POST", "/v1/accounts/acme/execute", "", req) }()
		automatortest.WaitFor(t, 10*time.Second, "the script to start", func() bool { return exists(started) })
		// The same key finds the running unit: that is how a caller whose
		// execute is blocked learns its id.
		sub := c.do("POST", "/v1/accounts/acme/submit", "", req)
		sub.want(t, http.StatusOK, "STATE_CLAIMED")
		id := sub.str("work_id")
		can := c.do("POST", "/v1/work/"+id+":cancel", "", nil)
		can.want(t, http.StatusOK, "STATE_CANCELLED")
		r := waittest.Recv(t, done, "the blocked execute to answer once its unit was cancelled")
		r.want(t, http.StatusConflict, "STATE_CANCELLED")
		if r.str("work_id") != id || !strings.Contains(r.str("reason"), "cancelled by the caller") {
			t.Errorf("execute answer for %s:\n%s", id, r.raw)
		}
		// Cancelling an ended unit changes nothing and is not an error.
		again := c.do("POST", "/v1/work/"+id+":cancel", "", map[string]any{})
		again.want(t, http.StatusOK, "STATE_CANCELLED")
		// :cancel and :wait read no body: one sent anyway is ignored.
		c.do("POST", "/v1/work/"+id+":cancel", "", `{"work_id": "w_other", "bogus": true}`).want(t, http.StatusOK, "STATE_CANCELLED")
		c.do("POST", "/v1/work/"+id+":wait", "", `not JSON`).want(t, http.StatusConflict, "STATE_CANCELLED")
		if a.CountWork(t) == 0 {
			t.Fatal("no unit stored")
		}
	})

	t.Run("submit, get, wait", func(t *testing.T) {
		sub := c.do("POST", "/v1/accounts/acme/submit", "", map[string]any{"command": map[string]any{"script": "hello.sh", "args": []string{"http"}}})
		if sub.status != http.StatusOK || sub.str("work_id") == "" || sub.str("deadline") == "" {
			t.Fatalf("submit: %d\n%s", sub.status, sub.raw)
		}
		id := sub.str("work_id")
		w := c.do("POST", "/v1/work/"+id+":wait", "", nil)
		w.want(t, http.StatusOK, "STATE_SUCCEEDED")
		if got := w.b64(t, "result", "stdout"); got != "hello http from a\n" {
			t.Errorf("stdout %q", got)
		}
		g := c.do("GET", "/v1/work/"+id, "", nil)
		g.want(t, http.StatusOK, "STATE_SUCCEEDED")
		if g.str("work_id") != id || g.b64(t, "result", "stdout") != "hello http from a\n" || g.str("finished_at") == "" {
			t.Errorf("get:\n%s", g.raw)
		}
	})

	t.Run("wait of a failed unit: 502; get of it: 200", func(t *testing.T) {
		sub := c.do("POST", "/v1/accounts/acme/submit", "", map[string]any{"command": map[string]any{"script": "nope.sh"}})
		id := sub.str("work_id")
		c.do("POST", "/v1/work/"+id+":wait", "", nil).want(t, http.StatusBadGateway, "STATE_FAILED")
		c.do("GET", "/v1/work/"+id, "", nil).want(t, http.StatusOK, "STATE_FAILED")
	})

	t.Run("idempotent submit", func(t *testing.T) {
		req := map[string]any{"command": map[string]any{"script": "hello.sh"}, "idempotency_key": "twice"}
		one := c.do("POST", "/v1/accounts/acme/submit", "", req)
		two := c.do("POST", "/v1/accounts/acme/submit", "", req)
		if one.status != 200 || two.status != 200 || one.str("work_id") != two.str("work_id") {
			t.Fatalf("two submits with one key: %s and %s", one.raw, two.raw)
		}
	})

	t.Run("list instances", func(t *testing.T) {
		r := c.do("GET", "/v1/accounts/acme/instances", "", nil)
		if r.status != 200 || !strings.Contains(string(r.raw), `"instance_id":"a"`) {
			t.Fatalf("instances: %d\n%s", r.status, r.raw)
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			name, method, path, key string
			body                    any
			status                  int
			code                    float64
			message                 string
		}{
			{"unknown account", "POST", "/v1/accounts/nobody/execute", "", map[string]any{"command": map[string]any{"script": "hello.sh"}}, 404, 5, `"nobody"`},
			{"unknown work", "GET", "/v1/work/w_0000", "", nil, 404, 5, "w_0000"},
			{"unknown work wait", "POST", "/v1/work/w_0000:wait", "", nil, 404, 5, "w_0000"},
			{"unknown work cancel", "POST", "/v1/work/w_0000:cancel", "", nil, 404, 5, "w_0000"},
			{"no script", "POST", "/v1/accounts/acme/submit", "", map[string]any{"command": map[string]any{}}, 400, 3, "command.script"},
			{"unknown field", "POST", "/v1/accounts/acme/submit", "", `{"command": {"scirpt": "hello.sh"}}`, 400, 3, "scirpt"},
			{"not JSON", "POST", "/v1/accounts/acme/submit", "", `script=hello.sh`, 400, 3, ""},
			{"bad timeout", "POST", "/v1/accounts/acme/submit", "", map[string]any{"command": map[string]any{"script": "x"}, "timeout": "-1s"}, 400, 3, "timeout"},
			// Written as the CLI's --timeout takes it, or as a number: the
			// message names the field and the form.
			{"timeout in minutes", "POST", "/v1/accounts/acme/execute", "", map[string]any{"command": map[string]any{"script": "x"}, "timeout": "5m"}, 400, 3, `timeout "5m" is not a valid duration: write it as a string of seconds ending in "s", such as "300s"`},
			{"timeout as a number", "POST", "/v1/accounts/acme/submit", "", map[string]any{"command": map[string]any{"script": "x"}, "timeout": 300}, 400, 3, `timeout 300 is not a valid duration`},
			{"timeout past a Duration", "POST", "/v1/accounts/acme/submit", "", map[string]any{"command": map[string]any{"script": "x"}, "timeout": "999999999999s"}, 400, 3, `timeout "999999999999s" is not a valid duration`},
			// Cut where a letter begins, not in the middle of one.
			{"long timeout", "POST", "/v1/accounts/acme/submit", "", map[string]any{"command": map[string]any{"script": "x"}, "timeout": strings.Repeat("é", 30)}, 400, 3, `timeout "` + strings.Repeat("é", 19) + `... is not a valid duration`},
			// A timeout that is right, or null, is not what is wrong.
			{"unknown field beside a timeout", "POST", "/v1/accounts/acme/submit", "", `{"command": {"scirpt": "x"}, "timeout": "60s"}`, 400, 3, `unknown field "scirpt"`},
			{"unknown field beside a null timeout", "POST", "/v1/accounts/acme/submit", "", `{"command": {"scirpt": "x"}, "timeout": null}`, 400, 3, `unknown field "scirpt"`},
		} {
			r := c.do(tc.method, tc.path, tc.key, tc.body)
			if r.status != tc.status || r.body["code"] != tc.code || !strings.Contains(r.str("message"), tc.message) {
				t.Errorf("%s: HTTP %d %s; want %d with code %v and a message containing %q", tc.name, r.status, r.raw, tc.status, tc.code, tc.message)
			}
		}
	})
}

// TestEveryRouteNeedsTheAPIKey: the gateway calls the gRPC server, whose
// interceptor authenticates; no route answers without a valid key, and the
// proxy token is not an API key. The 401 challenges for a Bearer token.
func TestEveryRouteNeedsTheAPIKey(t *testing.T) {
	a, c, _ := start(t)
	sub := c.do("POST", "/v1/accounts/acme/submit", "", map[string]any{"command": map[string]any{"script": "hello.sh"}})
	id := sub.str("work_id")
	cmd := map[string]any{"command": map[string]any{"script": "hello.sh"}}
	routes := []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/accounts/acme/execute", cmd},
		{"POST", "/v1/accounts/acme/submit", cmd},
		{"GET", "/v1/work/" + id, nil},
		{"POST", "/v1/work/" + id + ":wait", nil},
		{"POST", "/v1/work/" + id + ":cancel", nil},
		{"GET", "/v1/accounts/acme/instances", nil},
	}
	for _, key := range []string{"-", "oak_wrong", a.Token} {
		for _, rt := range routes {
			r := c.do(rt.method, rt.path, key, rt.body)
			if r.status != http.StatusUnauthorized || r.body["code"] != float64(16) {
				t.Errorf("%s %s with key %.8q: HTTP %d %s; want 401 Unauthenticated", rt.method, rt.path, key, r.status, r.raw)
			}
			// HTTP requires a challenge with a 401, not the message.
			if h := r.header.Values("WWW-Authenticate"); len(h) != 1 || h[0] != `Bearer realm="automator"` {
				t.Errorf("%s %s with key %.8q: WWW-Authenticate %q; want one Bearer challenge", rt.method, rt.path, key, h)
			}
		}
	}
	if n := a.CountWork(t); n != 1 {
		t.Fatalf("%d units after unauthenticated calls, want only the 1 submitted with the key", n)
	}
	if g := c.do("GET", "/v1/work/"+id, "", nil); g.str("state") == "STATE_CANCELLED" {
		t.Fatal("an unauthenticated cancel took effect")
	}
}

// TestAPIAnswersAreNeverStored: an answer of the API holds a unit's
// output, which may be secret, and its state, current only when made: no
// cache, a browser's calling the API included, may keep a copy.
func TestAPIAnswersAreNeverStored(t *testing.T) {
	_, c, _ := start(t)
	sub := c.do("POST", "/v1/accounts/acme/submit", "", map[string]any{"command": map[string]any{"script": "hello.sh"}})
	id := sub.str("work_id")
	for _, r := range []response{
		sub,
		c.do("POST", "/v1/work/"+id+":wait", "", nil),
		c.do("GET", "/v1/work/"+id, "", nil),
		c.do("GET", "/v1/accounts/acme/instances", "", nil),
		c.do("GET", "/v1/work/"+id, "-", nil),
		c.do("GET", "/v1/no/such/route", "", nil),
		c.do("GET", "/v1/openapi.json", "-", nil),
	} {
		if cc := r.header.Get("Cache-Control"); cc != "no-store" {
			t.Errorf("HTTP %d %.60s: Cache-Control %q, want no-store", r.status, r.raw, cc)
		}
	}
}

// TestAnswersCarryNoGRPCMetadataHeaders: the HTTP API's headers are its
// own; the metadata of the gRPC call behind it (its content-type,
// anything a handler sets) is not passed on as Grpc-Metadata-* headers
// (grpc-gateway's default), which an HTTP caller could take for part of
// the API.
func TestAnswersCarryNoGRPCMetadataHeaders(t *testing.T) {
	_, c, _ := start(t)
	sub := c.do("POST", "/v1/accounts/acme/submit", "", map[string]any{"command": map[string]any{"script": "hello.sh"}})
	id := sub.str("work_id")
	for _, r := range []response{
		sub,
		c.do("POST", "/v1/accounts/acme/execute", "", map[string]any{"command": map[string]any{"script": "hello.sh"}}),
		c.do("POST", "/v1/work/"+id+":wait", "", nil),
		c.do("GET", "/v1/work/"+id, "", nil),
		c.do("GET", "/v1/work/w_00000000000000000000000000000000", "", nil),
		c.do("GET", "/v1/accounts/acme/instances", "", nil),
	} {
		for name := range r.header {
			if strings.HasPrefix(strings.ToLower(name), "grpc-") {
				t.Errorf("HTTP %d %.60s: header %s: %q, want no gRPC metadata", r.status, r.raw, name, r.header.Values(name))
			}
		}
	}
}

func TestOpenAPIDocumentIsServed(t *testing.T) {
	_, c, _ := start(t)
	r := c.do("GET", "/v1/openapi.json", "-", nil)
	if r.status != 200 || r.body["swagger"] != "2.0" {
		t.Fatalf("openapi.json: %d\n%.300s", r.status, r.raw)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("openapi.json: Content-Type %q, want application/json", ct)
	}
	paths, _ := r.body["paths"].(map[string]any)
	for _, p := range []string{
		"/v1/accounts/{account}/execute", "/v1/accounts/{account}/submit",
		"/v1/work/{work_id}", "/v1/work/{work_id}:wait", "/v1/work/{work_id}:cancel",
	} {
		if _, ok := paths[p]; !ok {
			t.Errorf("openapi.json has no path %s", p)
		}
	}
	exec := paths["/v1/accounts/{account}/execute"].(map[string]any)["post"].(map[string]any)["responses"].(map[string]any)
	for _, code := range []string{"200", "401", "404", "409", "502", "504"} {
		if _, ok := exec[code]; !ok {
			t.Errorf("execute documents no %s response", code)
		}
	}
	if !strings.Contains(string(r.raw), `"idempotency_key"`) || !strings.Contains(string(r.raw), `"Authorization"`) {
		t.Error("openapi.json lacks idempotency_key or the Authorization scheme")
	}
	// Every operation of the API, by path and method.
	operations := map[string]string{
		"/v1/accounts/{account}/execute":   "post",
		"/v1/accounts/{account}/submit":    "post",
		"/v1/accounts/{account}/instances": "get",
		"/v1/work/{work_id}":               "get",
		"/v1/work/{work_id}:wait":          "post",
		"/v1/work/{work_id}:cancel":        "post",
	}
	// A 404 means an unknown account where a path names one, and an
	// unknown unit where it names a work id (docs/api.md).
	for path, method := range operations {
		want := "account"
		if strings.HasPrefix(path, "/v1/work/") {
			want = "unit"
		}
		notFound, _ := paths[path].(map[string]any)[method].(map[string]any)["responses"].(map[string]any)["404"].(map[string]any)
		if d, _ := notFound["description"].(string); !strings.Contains(d, want) {
			t.Errorf("%s %s: 404 described as %q; want it to name the %s", method, path, d, want)
		}
	}
	// Every operation may be refused with 429 (the failed-authentication
	// budget; execute and submit, the account's full queue), and the
	// document says so, with the Retry-After that says when to try again.
	for path, method := range operations {
		tooMany, _ := paths[path].(map[string]any)[method].(map[string]any)["responses"].(map[string]any)["429"].(map[string]any)
		headers, _ := tooMany["headers"].(map[string]any)
		retryAfter, _ := headers["Retry-After"].(map[string]any)
		if d, _ := tooMany["description"].(string); d == "" || retryAfter["type"] != "integer" {
			t.Errorf("%s %s: 429 %v; want it described, with an integer Retry-After header", method, path, tooMany)
		}
		if d, _ := tooMany["description"].(string); strings.HasPrefix(path, "/v1/accounts/{account}/") && path != "/v1/accounts/{account}/instances" && !strings.Contains(d, "max_queued_per_account") {
			t.Errorf("%s %s: 429 described as %q; want it to name the full queue (max_queued_per_account)", method, path, d)
		}
	}
	// What the server requires, the document declares required.
	defs, _ := r.body["definitions"].(map[string]any)
	// execute and submit require their body; :wait and :cancel read none,
	// so they declare none (a required one would make generated clients
	// insist on sending one).
	for path, want := range map[string]bool{
		"/v1/accounts/{account}/execute": true, "/v1/accounts/{account}/submit": true,
		"/v1/work/{work_id}:wait": false, "/v1/work/{work_id}:cancel": false,
	} {
		params, _ := paths[path].(map[string]any)["post"].(map[string]any)["parameters"].([]any)
		var body map[string]any
		for _, p := range params {
			if p, _ := p.(map[string]any); p["in"] == "body" {
				body = p
			}
		}
		switch {
		case want && (body == nil || body["required"] != true):
			t.Errorf("POST %s: body parameter %v, want a required one", path, body)
		case !want && body != nil:
			t.Errorf("POST %s: body parameter %v, want none: the call reads no body", path, body)
		}
	}
	// A duration's form is declared: the form the server writes and reads.
	sub := c.do("POST", "/v1/accounts/acme/submit", "", map[string]any{"command": map[string]any{"script": "x"}, "timeout": "1.5s"})
	sub.want(t, http.StatusOK, "")
	for def, field := range map[string]string{"AutomatorServiceExecuteOnProxyBody": "timeout", "AutomatorServiceSubmitBody": "timeout", "v1WorkStatus": "remaining"} {
		prop, _ := defs[def].(map[string]any)["properties"].(map[string]any)[field].(map[string]any)
		pattern, _ := prop["pattern"].(string)
		re, err := regexp.Compile(pattern)
		if pattern == "" || err != nil {
			t.Errorf("definition %s: %s has pattern %q (%v), want one", def, field, pattern, err)
			continue
		}
		for _, d := range []string{"300s", "1.5s", sub.str("remaining")} {
			if !re.MatchString(d) {
				t.Errorf("definition %s: %s pattern %q does not match %q", def, field, pattern, d)
			}
		}
		for _, d := range []string{"5m", "300", "1h30m"} {
			if re.MatchString(d) {
				t.Errorf("definition %s: %s pattern %q matches %q, which the server refuses", def, field, pattern, d)
			}
		}
	}
	for def, field := range map[string]string{
		"v1Command": "script", "AutomatorServiceExecuteOnProxyBody": "command", "AutomatorServiceSubmitBody": "command",
	} {
		required, _ := defs[def].(map[string]any)["required"].([]any)
		if len(required) != 1 || required[0] != field {
			t.Errorf("definition %s: required %v, want [%s]", def, required, field)
		}
	}
}

// TestPlaintextAutomatorServesTheAPI: with --insecure-plaintext the
// in-memory connection speaks plaintext too.
func TestPlaintextAutomatorServesTheAPI(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{Plaintext: true})
	c := api{t: t, base: a.HTTPURL, apiKey: a.APIKey}
	r := c.do("POST", "/v1/accounts/acme/submit", "", map[string]any{"command": map[string]any{"script": "x"}})
	r.want(t, http.StatusOK, "STATE_QUEUED")
	c.do("POST", "/v1/accounts/acme/submit", "oak_wrong", map[string]any{"command": map[string]any{"script": "x"}}).want(t, http.StatusUnauthorized, "")
}

// TestBodyLargerThanTheLimitIsRefused: the gateway bounds what it reads,
// and says which limit the body is over (docs/api.md: 400, 16 MiB).
func TestBodyLargerThanTheLimitIsRefused(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	c := api{t: t, base: a.HTTPURL, apiKey: a.APIKey}
	big := `{"command": {"script": "x", "args": ["` + strings.Repeat("a", 17<<20) + `"]}}`
	r := c.do("POST", "/v1/accounts/acme/submit", "", big)
	if r.status != http.StatusBadRequest || r.body["code"] != float64(3) || r.str("message") != "the request body is larger than the limit of 16 MiB" {
		t.Fatalf("a 17 MiB body: HTTP %d %.200s; want 400, code 3, naming the limit", r.status, r.raw)
	}
	if n := a.CountWork(t); n != 0 {
		t.Fatalf("%d units queued", n)
	}
}

// TestBodyOfExactlyTheLimitIsRead: the limit is 16 MiB (docs/api.md)
// and holds a body of exactly that size: one padded with white space after
// its object is run, and one byte more is refused, 400 with nothing
// queued, though its object came whole before the byte too many. The
// command is small, so only the gateway's limit is in question, not
// gRPC's.
func TestBodyOfExactlyTheLimitIsRead(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	c := api{t: t, base: a.HTTPURL, apiKey: a.APIKey}
	const limit = 16 << 20
	body := func(n int) string {
		object := `{"command": {"script": "x"}}`
		return object + strings.Repeat(" ", n-len(object))
	}
	c.do("POST", "/v1/accounts/acme/submit", "", body(limit)).want(t, http.StatusOK, "STATE_QUEUED")
	if n := a.CountWork(t); n != 1 {
		t.Fatalf("after a body of exactly 16 MiB: %d units queued, want 1", n)
	}
	r := c.do("POST", "/v1/accounts/acme/submit", "", body(limit+1))
	if r.status != http.StatusBadRequest || r.body["code"] != float64(3) || r.str("message") != "the request body is larger than the limit of 16 MiB" {
		t.Fatalf("a body of 16 MiB + 1 byte: HTTP %d %.200s; want 400, code 3, naming the limit", r.status, r.raw)
	}
	if n := a.CountWork(t); n != 1 {
		t.Fatalf("after a body of 16 MiB + 1 byte: %d units queued, want still 1", n)
	}
}

// TestCommandOverTheMessageLimitIsABadRequest: a body the gateway reads
// (under 16 MiB) whose command is larger than one gRPC message (8 MiB) is
// a limit exceeded, 400 like every other (docs/api.md), not 429, which
// tells a caller to submit the same again later. Its message speaks of the
// caller's request and the limit, not of grpc-go's in-memory send, which
// an HTTP caller never made ("trying to send message larger than max").
func TestCommandOverTheMessageLimitIsABadRequest(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	c := api{t: t, base: a.HTTPURL, apiKey: a.APIKey}
	big := `{"command": {"script": "x", "args": ["` + strings.Repeat("a", 10<<20) + `"]}}`
	// Decoding and encoding 10 MiB under the race detector takes the
	// better part of a second of CPU, which took longer than
	// waittest.Bound on a loaded machine of 2 cores: not a timing
	// assertion, only how long the test waits for the answer.
	r := api{t: t, base: a.HTTPURL, apiKey: a.APIKey, within: 4 * waittest.Bound}.do("POST", "/v1/accounts/acme/submit", "", big)
	const want = "the request is 10485779 bytes once encoded, more than the limit of 8 MiB of one gRPC message: send less stdin, or fewer or shorter args or env"
	if r.status != http.StatusBadRequest || r.body["code"] != float64(3) || r.str("message") != want {
		t.Fatalf("a 10 MiB command: HTTP %d %.200s; want 400, code 3, %q", r.status, r.raw, want)
	}
	if ra := r.header.Values("Retry-After"); len(ra) != 0 {
		t.Errorf("a 10 MiB command: Retry-After %q; want none, since sending it again never helps", ra)
	}
	if n := a.CountWork(t); n != 0 {
		t.Fatalf("%d units queued", n)
	}
	// A normal submit is served after it.
	c.do("POST", "/v1/accounts/acme/submit", "", map[string]any{"command": map[string]any{"script": "x"}}).want(t, http.StatusOK, "STATE_QUEUED")
}

// TestWrongMethodIsMethodNotAllowed: a route called with another method
// (GET on execute, say) is 405 naming the method, not 501 "not
// implemented", with the path's methods in Allow (HEAD wherever GET), and
// runs nothing.
func TestWrongMethodIsMethodNotAllowed(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	c := api{t: t, base: a.HTTPURL, apiKey: a.APIKey}
	for _, rt := range []struct{ method, path, allow string }{
		{"GET", "/v1/accounts/acme/execute", "POST"},
		{"GET", "/v1/accounts/acme/submit", "POST"},
		{"PUT", "/v1/accounts/acme/submit", "POST"},
		{"DELETE", "/v1/work/w_0123456789abcdef0123456789abcdef", "GET, HEAD"},
		{"PUT", "/v1/work/w_0123456789abcdef0123456789abcdef:cancel", "GET, HEAD, POST"}, // GET: the unit "w_...:cancel"
		{"POST", "/v1/accounts/acme/instances", "GET, HEAD"},
		{"POST", "/v1/openapi.json", "GET, HEAD"},
	} {
		r := c.do(rt.method, rt.path, "", nil)
		if r.status != http.StatusMethodNotAllowed || !strings.Contains(r.str("message"), rt.method) {
			t.Errorf("%s %s: HTTP %d %s; want 405 naming %s", rt.method, rt.path, r.status, r.raw, rt.method)
		}
		// HTTP requires a 405 to list the methods the path takes.
		if allow := r.header.Values("Allow"); len(allow) != 1 || allow[0] != rt.allow {
			t.Errorf("%s %s: Allow %q, want %q", rt.method, rt.path, allow, rt.allow)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q, want application/json", rt.method, rt.path, ct)
		}
	}
	if n := a.CountWork(t); n != 0 {
		t.Fatalf("%d units queued by calls with the wrong method", n)
	}
}

// TestWrongMethodOnACraftedPathQuotesItCut: the path a 405 names is
// quoted, no more than its first 80 bytes with its length, as the API
// quotes what else a caller sent (and so is a method longer than that): a crafted URL's kilobytes, or a bidi
// override or line break percent-encoded in it, do not come back as they
// are.
func TestWrongMethodOnACraftedPathQuotesItCut(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	c := api{t: t, base: a.HTTPURL, apiKey: a.APIKey}
	for _, tc := range []struct{ method, path, want, not string }{
		{"GET", "/v1/accounts/" + strings.Repeat("x", 7000) + "/submit", `method GET is not allowed on "/v1/accounts/xxx`, strings.Repeat("x", 100)},
		{"GET", "/v1/accounts/%E2%80%AEevil%0Aline/submit", `method GET is not allowed on "/v1/accounts/\u202eevil\nline/submit";`, "\u202e"},
		{strings.Repeat("M", 7000), "/v1/accounts/acme/submit", `method "MMM`, strings.Repeat("M", 100)},
	} {
		r := c.do(tc.method, tc.path, "", nil)
		if msg := r.str("message"); r.status != http.StatusMethodNotAllowed || !strings.Contains(msg, tc.want) || strings.Contains(msg, tc.not) {
			t.Errorf("%.10s %.40s…: HTTP %d %.300q; want 405 saying %s, without %q", tc.method, tc.path, r.status, msg, tc.want, tc.not)
		}
	}
}

// TestBodyThatIsNotJSONSaysSo: a body cut short, that is not JSON at all
// or that has more after its object is a bad request whose message says
// what is wrong with the body, not json's bare "unexpected EOF"; nothing
// is queued (not even the object before a stray brace).
func TestBodyThatIsNotJSONSaysSo(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	c := api{t: t, base: a.HTTPURL, apiKey: a.APIKey}
	for _, tc := range []struct{ name, body, message string }{
		{"cut short", `{"command": {"script": "hello.sh"`, "the request body is not complete JSON"},
		{"cut short in a string", `{"command": {"script": "hel`, "the request body is not complete JSON"},
		{"a form", `script=hello.sh`, "the request body is not valid JSON: invalid character 's' looking for beginning of value (at byte 1)"},
		{"a brace too many", `{"command": {"script": "hello.sh"}}}`, `the request body is not valid JSON: '}' follows its value (at byte 36)`},
		{"two objects", `{"command": {"script": "hello.sh"}} {"command": {"script": "hello.sh"}}`, `the request body is not valid JSON: '{' follows its value (at byte 37)`},
		// Complete, valid JSON, whose text is no UTF-8: not "cut short".
		{"a lone surrogate", `{"command": {"script": "hello.sh", "args": ["\ud800"]}}`, `the request body holds \ud800 at byte 46, half of a UTF-16 surrogate pair without its other half, which is no character (invalid UTF-8 in string)`},
		{"a lone low surrogate", `{"command": {"script": "hello.sh"}, "idempotency_key": "a\\\udc00"}`, `holds \udc00 at byte 60, half of a UTF-16 surrogate pair`},
		{"a pair the wrong way round", `{"command": {"script": "\udc00\ud800"}}`, `holds \udc00 at byte 25`},
	} {
		r := c.do("POST", "/v1/accounts/acme/submit", "", tc.body)
		if r.status != http.StatusBadRequest || r.body["code"] != float64(3) || !strings.Contains(r.str("message"), tc.message) {
			t.Errorf("%s: HTTP %d %s; want 400, code 3, a message containing %q", tc.name, r.status, r.raw, tc.message)
		}
	}
	if n := a.CountWork(t); n != 0 {
		t.Fatalf("%d units queued by bodies that are not JSON", n)
	}
	// A whole pair is a character (U+1F600), and an escaped backslash
	// before "u" no escape.
	c.do("POST", "/v1/accounts/acme/submit", "", `{"command": {"script": "hello.sh", "args": ["\ud83d\ude00", "\\ud800"]}}`).want(t, http.StatusOK, "STATE_QUEUED")
	// White space after the object is no more than a line's end.
	c.do("POST", "/v1/accounts/acme/submit", "", "{\"command\": {\"script\": \"hello.sh\"}}\r\n\t \n").want(t, http.StatusOK, "STATE_QUEUED")
	// A UTF-8 byte-order mark before it (Windows PowerShell 5's files) is
	// skipped: it was refused as "invalid character 'ï'".
	c.do("POST", "/v1/accounts/acme/submit", "", "\xef\xbb\xbf{\"command\": {\"script\": \"hello.sh\"}}").want(t, http.StatusOK, "STATE_QUEUED")
}

// TestAnEncodedBodyIsUnsupported: a body sent with a Content-Encoding
// (gzip) was read as JSON and refused as "invalid character '\x1f'": it
// is 415, saying the API takes the body as it is; nothing is queued.
func TestAnEncodedBodyIsUnsupported(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	req, err := http.NewRequest("POST", a.HTTPURL+"/v1/accounts/acme/submit", strings.NewReader("\x1f\x8b\x08\x00"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.APIKey)
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType || !strings.Contains(string(body), `"message":"the request body is encoded (Content-Encoding: gzip): the API takes it as it is`) {
		t.Errorf("a gzip body: HTTP %d %s; want 415 saying the API takes no encoding", resp.StatusCode, body)
	}
	if n := a.CountWork(t); n != 0 {
		t.Errorf("%d units queued by an encoded body", n)
	}
}

// TestBodyOfACallWithoutAValidKeyIsNotRead: a call with no key or a wrong
// one is refused (401) before the automator reads its body, so a client
// without a key cannot make it read and hold a body of up to 16 MiB per
// request, nor hold a request open by sending its body slowly. The body
// here never ends: the answer comes all the same.
func TestBodyOfACallWithoutAValidKeyIsNotRead(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	for _, key := range []string{"", "oak_wrong"} {
		body, w := io.Pipe()
		go func() { _, _ = io.WriteString(w, `{"command": {"script": "x", "args": ["`) }()
		ctx := waittest.Context(t, "the refusal of a call without a valid key")
		// The client waits for its body to be sent: end it with the wait.
		stop := context.AfterFunc(ctx, func() { w.CloseWithError(ctx.Err()) })
		defer stop()
		req, err := http.NewRequestWithContext(ctx, "POST", a.HTTPURL+"/v1/accounts/acme/submit", body)
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		w.Close()
		if err != nil {
			t.Fatalf("key %q: %v", key, err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(raw), `"code":16`) {
			t.Errorf("key %q: HTTP %d %s; want 401 Unauthenticated", key, resp.StatusCode, raw)
		}
	}
	if n := a.CountWork(t); n != 0 {
		t.Fatalf("%d units queued", n)
	}
}

// TestAuthSchemeIsCaseInsensitiveOverHTTP: "Authorization: bearer KEY" is
// "Bearer KEY" (RFC 9110 11.1: the scheme is case-insensitive), both for
// the gateway's check before the body and for the server's own; a wrong
// scheme is still refused.
func TestAuthSchemeIsCaseInsensitiveOverHTTP(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	send := func(method, path, auth, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(waittest.Context(t, method+" "+path+" to answer"), method, a.HTTPURL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	for _, scheme := range []string{"Bearer", "bearer", "BEARER", "bEaReR"} {
		if code, raw := send("GET", "/v1/accounts/acme/instances", scheme+" "+a.APIKey, ""); code != http.StatusOK {
			t.Errorf("GET with %q: HTTP %d %s, want 200", scheme+" <key>", code, raw)
		}
		if code, raw := send("POST", "/v1/accounts/acme/submit", scheme+" "+a.APIKey, `{"command": {"script": "x"}}`); code != http.StatusOK {
			t.Errorf("submit with %q: HTTP %d %s, want 200", scheme+" <key>", code, raw)
		}
	}
	for _, auth := range []string{"Basic " + a.APIKey, "Bearer  " + a.APIKey, "Bearer" + a.APIKey, "bearer"} {
		if code, raw := send("GET", "/v1/accounts/acme/instances", auth, ""); code != http.StatusUnauthorized {
			t.Errorf("GET with %.10q: HTTP %d %s, want 401", auth, code, raw)
		}
	}
}

// TestOnlyTheAuthorizationHeaderAuthenticates: the gateway passes the
// Authorization header on to the server as "authorization", and no
// Grpc-Metadata-Authorization (grpc-gateway's default header matcher
// forwards no Grpc-Metadata- header), so its check before the body reads
// the former alone: a valid key is not refused for a stray
// Grpc-Metadata-Authorization beside it, and a key sent only there is no
// key, refused before the body is read (the body here never ends).
func TestOnlyTheAuthorizationHeaderAuthenticates(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	ctx := waittest.Context(t, "the answers")
	req, err := http.NewRequestWithContext(ctx, "GET", a.HTTPURL+"/v1/accounts/acme/instances", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.APIKey)
	req.Header.Set("Grpc-Metadata-Authorization", "Bearer oak_wrong")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a valid key with a stray Grpc-Metadata-Authorization: HTTP %d %s, want 200", resp.StatusCode, raw)
	}

	body, w := io.Pipe()
	go func() { _, _ = io.WriteString(w, `{"command": {"script": "x", "args": ["`) }()
	// The client waits for its body to be sent: end it with the wait.
	stop := context.AfterFunc(ctx, func() { w.CloseWithError(ctx.Err()) })
	defer stop()
	req, err = http.NewRequestWithContext(ctx, "POST", a.HTTPURL+"/v1/accounts/acme/submit", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Grpc-Metadata-Authorization", "Bearer "+a.APIKey)
	resp, err = http.DefaultClient.Do(req)
	w.Close()
	if err != nil {
		t.Fatalf("a key in Grpc-Metadata-Authorization alone: %v", err)
	}
	raw, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a key in Grpc-Metadata-Authorization alone: HTTP %d %s, want 401", resp.StatusCode, raw)
	}
}

// TestQueryParametersAreRefusedNotIgnored: no route of the API reads its
// query string (execute's and submit's fields are in the JSON body, the
// others' in the path), so a field sent there would be dropped unseen: a
// submit retried with ?idempotency_key=... would run its script twice, an
// execute given ?timeout=10s would wait five minutes. Like an unknown
// field in the body, a query parameter is refused (400, naming it) before
// anything is queued; the API key is checked first, as for every call.
func TestQueryParametersAreRefusedNotIgnored(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	c := api{t: t, base: a.HTTPURL, apiKey: a.APIKey}
	body := `{"command": {"script": "hello.sh"}}`
	for _, tc := range []struct{ method, path, body, param string }{
		{"POST", "/v1/accounts/acme/submit?idempotency_key=deploy-1", body, "idempotency_key"},
		{"POST", "/v1/accounts/acme/execute?timeout=10s", body, "timeout"},
		{"POST", "/v1/accounts/acme/submit?account=other", body, "account"},
		{"GET", "/v1/accounts/acme/instances?online=true", "", "online"},
		{"GET", "/v1/work/w_0123456789abcdef0123456789abcdef?wait=1", "", "wait"},
		{"POST", "/v1/work/w_0123456789abcdef0123456789abcdef:wait?timeout=5s", "", "timeout"},
	} {
		r := c.do(tc.method, tc.path, "", tc.body)
		if r.status != http.StatusBadRequest || r.body["code"] != float64(3) || !strings.Contains(r.str("message"), `"`+tc.param+`"`) {
			t.Errorf("%s %s: HTTP %d %s; want 400, code 3, naming %q", tc.method, tc.path, r.status, r.raw, tc.param)
		}
		if r := c.do(tc.method, tc.path, "-", tc.body); r.status != http.StatusUnauthorized {
			t.Errorf("%s %s without an API key: HTTP %d %s; want 401", tc.method, tc.path, r.status, r.raw)
		}
	}
	if n := a.CountWork(t); n != 0 {
		t.Fatalf("%d units queued by calls with a query string", n)
	}
	// A bare "?" carries no parameter.
	c.do("POST", "/v1/accounts/acme/submit?", "", body).want(t, http.StatusOK, "STATE_QUEUED")
}

// TestAPathParameterThatIsNotTextIsRefusedAsSuch: a path's %-escapes may
// decode to bytes that are not UTF-8 (%C3 alone); the call's fields are
// protobuf strings, which cannot hold them. The call is refused as bad
// input (400, naming the parameter), not answered as an internal error
// (it was 500, "error while marshaling"), and nothing is queued.
func TestAPathParameterThatIsNotTextIsRefusedAsSuch(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	c := api{t: t, base: a.HTTPURL, apiKey: a.APIKey}
	for _, tc := range []struct{ method, path, body, param string }{
		{"GET", "/v1/work/w_%C3%28", "", "work_id"},
		{"POST", "/v1/work/w_%C3%28:cancel", "", "work_id"},
		{"POST", "/v1/work/w_%FF:wait", "", "work_id"},
		{"GET", "/v1/accounts/%C3%28/instances", "", "account"},
		{"POST", "/v1/accounts/acme%FF/submit", `{"command": {"script": "hello.sh"}}`, "account"},
	} {
		r := c.do(tc.method, tc.path, "", tc.body)
		if r.status != http.StatusBadRequest || r.body["code"] != float64(3) || !strings.Contains(r.str("message"), tc.param+" ") || !strings.Contains(r.str("message"), "not UTF-8") {
			t.Errorf("%s %s: HTTP %d %s; want 400, code 3, naming %s as not UTF-8", tc.method, tc.path, r.status, r.raw, tc.param)
		}
	}
	if n := a.CountWork(t); n != 0 {
		t.Fatalf("%d units queued by calls whose path is not text", n)
	}
}

// TestAGrpcTimeoutHeaderIsNotTheCallsDeadline: grpc-gateway takes a
// Grpc-Timeout request header for the call's deadline, and answers 504 once
// it passes, though a submit made before it stands: its caller, told the
// call failed, would submit again and run the script twice. The API reads
// no such header: a submit with a 1 ns one queues its unit and says so.
func TestAGrpcTimeoutHeaderIsNotTheCallsDeadline(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	for range 3 {
		req, err := http.NewRequest("POST", a.HTTPURL+"/v1/accounts/acme/submit", strings.NewReader(`{"command": {"script": "hello.sh"}}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+a.APIKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Grpc-Timeout", "1n")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "STATE_QUEUED") {
			t.Errorf("submit with Grpc-Timeout: 1n: HTTP %d %s; want 200, the unit queued", resp.StatusCode, body)
		}
	}
	if n := a.CountWork(t); n != 3 {
		t.Errorf("%d units queued by 3 submits", n)
	}
}

// TestABodyThatDoesNotDecodeIsAnsweredWithoutItsValue: a value the API
// refuses (a stdin of megabytes that is not base64, an unknown field's
// name as long) is named in the answer, not sent back whole: the answer
// stays short, and a stdin, which may be secret, does not reach the
// caller's error logs.
func TestABodyThatDoesNotDecodeIsAnsweredWithoutItsValue(t *testing.T) {
	a := automatortest.Start(t, automatortest.Options{})
	c := api{t: t, base: a.HTTPURL, apiKey: a.APIKey}
	huge := strings.Repeat("!", 1<<20)
	for _, tc := range []struct{ body, want string }{
		{`{"command": {"script": "hello.sh", "stdin": "` + huge + `"}}`, "stdin"},
		{`{"command": {"script": "hello.sh"}, "` + huge + `": 1}`, "unknown field"},
	} {
		r := c.do("POST", "/v1/accounts/acme/submit", "", tc.body)
		if r.status != http.StatusBadRequest || !strings.Contains(r.str("message"), tc.want) || len(r.raw) > 1024 {
			t.Errorf("a body with a refused megabyte value: HTTP %d, %d bytes, message %.120q; want 400 naming %q in under 1 KiB", r.status, len(r.raw), r.str("message"), tc.want)
		}
	}
	if n := a.CountWork(t); n != 0 {
		t.Errorf("%d units queued", n)
	}
}
