//go:build linux

package examples_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/internal/closedport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start runs an automator and one proxy instance serving the repository's
// example scripts (deploy/scripts), as `make demo` does.
func start(t *testing.T) *automatortest.Automator {
	t.Helper()
	a := automatortest.Start(t, automatortest.Options{})
	scripts, err := filepath.Abs("../../deploy/scripts")
	if err != nil {
		t.Fatal(err)
	}
	a.StartProxy(t, automatortest.ProxyOptions{InstanceID: "docs-a", ScriptsDir: scripts}).WaitPolling(t)
	return a
}

func exampleEnv(a *automatortest.Automator) []string {
	return append(os.Environ(), "AUTOMATOR_HTTP="+a.HTTPURL, "AUTOMATOR_API_KEY="+a.APIKey, "ACCOUNT="+a.Account)
}

// TestCurlExample runs docs/examples/curl.sh: execute, then submit with
// stdin and an idempotency key, wait and get.
func TestCurlExample(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed; the curl example cannot run here")
	}
	a := start(t)
	cmd := exec.Command("sh", "curl.sh")
	cmd.Env = exampleEnv(a)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("curl.sh: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}
	// Three answers, each followed by its "HTTP <status>" line.
	parts := regexp.MustCompile(`(?m)^HTTP (\d+)$`).Split(strings.TrimSpace(string(out)), -1)
	statuses := regexp.MustCompile(`(?m)^HTTP (\d+)$`).FindAllStringSubmatch(string(out), -1)
	if len(statuses) != 3 {
		t.Fatalf("curl.sh printed %d answers, want 3:\n%s", len(statuses), out)
	}
	var answers []map[string]any
	for i, s := range statuses {
		if s[1] != "200" {
			t.Fatalf("answer %d: HTTP %s:\n%s", i+1, s[1], out)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(parts[i]), &m); err != nil {
			t.Fatalf("answer %d is not JSON: %v\n%s", i+1, err, parts[i])
		}
		answers = append(answers, m)
	}
	stdout := func(m map[string]any) string {
		b, _ := base64.StdEncoding.DecodeString(m["result"].(map[string]any)["stdout"].(string))
		return string(b)
	}
	if got := stdout(answers[0]); !strings.HasPrefix(got, "hello world from instance docs-a") {
		t.Errorf("execute: stdout %q", got)
	}
	// sha256sum of "some data\n", the stdin curl.sh sends.
	const want = "5aa03f96c77536579166fba147929626cc3a97960e994057a9d80271a736d10f\n"
	for i, m := range answers[1:] {
		if m["state"] != "STATE_SUCCEEDED" || stdout(m) != want {
			t.Errorf("answer %d: %v, stdout %q; want succeeded with the checksum %q", i+2, m["state"], stdout(m), want)
		}
	}
	if answers[1]["work_id"] != answers[2]["work_id"] {
		t.Errorf("wait and get answered for different units")
	}
}

// TestCurlExampleSubmitHonoursRetryAfter: curl.sh's submit, refused with
// 429 and Retry-After (the account's queue full), is made again after it
// with the same idempotency key, and the unit it then gets is waited for.
func TestCurlExampleSubmitHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed; the curl example cannot run here")
	}
	const unit = `{"work_id": "w_00000000000000000000000000000001", "state": "STATE_SUCCEEDED"}`
	var mu sync.Mutex
	var keys []string
	automator := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if !strings.HasSuffix(r.URL.Path, "/submit") {
			io.WriteString(w, unit)
			return
		}
		var req struct {
			Key string `json:"idempotency_key"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Errorf("submit's body: %v", err)
		}
		mu.Lock()
		keys = append(keys, req.Key)
		n := len(keys)
		mu.Unlock()
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"code": 8, "message": "account \"acme\" has as many units queued as its limit allows (1, limits.max_queued_per_account)", "details": []}`)
			return
		}
		io.WriteString(w, unit)
	}))
	defer automator.Close()
	cmd := exec.Command("sh", "curl.sh")
	cmd.Env = append(os.Environ(), "AUTOMATOR_HTTP="+automator.URL, "AUTOMATOR_API_KEY=oak_x", "ACCOUNT=acme")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("curl.sh: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
		t.Errorf("submits with keys %q; want two with the same key", keys)
	}
	// The unit the second submit got is waited for and read by its id.
	if n := strings.Count(string(out), "w_00000000000000000000000000000001"); n != 3 {
		t.Errorf("curl.sh printed the unit %d times, want 3 (execute, wait, get):\n%s", n, out)
	}
}

// TestPythonExample runs docs/examples/execute.py: a result with its exit
// code, its stdin sent to the script, and a script the proxy cannot run
// (125).
func TestPythonExample(t *testing.T) {
	t.Parallel()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed (not in PATH); the Python example cannot run here")
	}
	a := start(t)
	run := func(stdin string, args ...string) (int, string, string) {
		return runPython(t, py, exampleEnv(a), stdin, args...)
	}
	code, out, errs := run("", "hello.sh", "python")
	if code != 0 || !strings.HasPrefix(out, "hello python from instance docs-a") {
		t.Errorf("execute.py hello.sh: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// Its stdin, not a terminal here, is the script's: sha256sum of
	// "some data\n".
	code, out, errs = run("some data\n", "checksum.sh")
	if code != 0 || out != "5aa03f96c77536579166fba147929626cc3a97960e994057a9d80271a736d10f\n" {
		t.Errorf("execute.py checksum.sh: exit %d, stdout %q, stderr %q; want the checksum of its stdin", code, out, errs)
	}
	code, out, errs = run("data\n", "exit-code.sh", "3")
	if code != 3 || errs != "exiting with 3\n" {
		t.Errorf("execute.py exit-code.sh 3: exit %d, stdout %q, stderr %q; want 3", code, out, errs)
	}
	code, _, errs = run("", "not-deployed.sh")
	if code != 125 || !strings.Contains(errs, "not-deployed.sh") {
		t.Errorf("execute.py not-deployed.sh: exit %d, stderr %q; want 125 naming the script", code, errs)
	}
	// Refused at submit (400), no unit made: a call that failed.
	if code, _, errs = run("", "../../bin/sh"); code != 255 || !strings.Contains(errs, `HTTP 400: command.script "../../bin/sh" is refused: contains a path separator`) {
		t.Errorf("execute.py ../../bin/sh: exit %d, stderr %q; want 255 and the refusal", code, errs)
	}
}

// TestDocsShowTheExamplesThatRun: docs/api.md shows each example file
// verbatim, so the documented code is the tested code.
func TestDocsShowTheExamplesThatRun(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../api.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"curl.sh", "execute.py", "goclient/main.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(doc, b) {
			t.Errorf("docs/api.md does not show docs/examples/%s verbatim; copy the file into its code block", f)
		}
	}
}

// TestPythonExampleCallFailureExits255: when the call itself fails, the
// Python example exits 255 with a last line on stderr saying why and no
// traceback, as its doc says: an automator it cannot reach (after its
// retries), and an answer that is not the automator's JSON (a reverse
// proxy's own 502 page), which is no outcome of a unit.
func TestPythonExampleCallFailureExits255(t *testing.T) {
	t.Parallel()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed (not in PATH); the Python example cannot run here")
	}
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		io.WriteString(w, "<html><body><h1>502 Bad Gateway</h1></body></html>\n")
	}))
	t.Cleanup(page.Close)
	closed := closedport.Addr(t)
	unreachable := "http://" + closed
	for _, tc := range []struct{ name, url, want string }{
		{"a reverse proxy's 502 page", page.URL, "502"},
		{"no automator listening", unreachable, closed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, _, errs := runPython(t, py, append(os.Environ(), "AUTOMATOR_HTTP="+tc.url, "AUTOMATOR_API_KEY=oak_x"), "", "hello.sh")
			lines := strings.Split(strings.TrimSpace(errs), "\n")
			last := lines[len(lines)-1]
			if code != 255 || strings.Contains(errs, "Traceback") || !strings.Contains(last, tc.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant 255 and a last line naming %q, no traceback", code, errs, tc.want)
			}
		})
	}
}

// TestPythonExampleHonoursRetryAfter: a 429 with Retry-After (the
// account's queue full, which queued nothing) is tried again after it, with
// the same idempotency key, a bounded number of times; when the refusals
// outlast them, or a 429 says no time or more than a minute, the example
// exits 255 with the refusal, saying when to try again. A full disk (507)
// is not tried again.
func TestPythonExampleHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed (not in PATH); the Python example cannot run here")
	}
	const refusal = `{"code": 8, "message": "account \"acme\" has as many units queued as its limit allows (1, limits.max_queued_per_account)", "details": []}`
	const diskFull = `{"code": 8, "message": "the automator's database is out of disk space while queueing work: nothing was stored; retry once space is freed", "details": []}`
	for _, tc := range []struct {
		name       string
		retryAfter string // none when empty
		refuse     int    // how many calls are refused
		calls      int    // the calls the example makes
		code       int
		lastLine   string // what its last line on stderr holds
		status     int    // of the refusals: 429 when 0, or 507 (a full disk)
	}{
		{"refused twice, then run", "1", 2, 3, 0, "hello", 0},
		{"refused every time", "0", 100, 5, 255, "HTTP 429: account \"acme\" has as many units queued as its limit allows (1, limits.max_queued_per_account) (try again in 0s)", 0},
		{"a 429 that says no time", "", 100, 1, 255, "HTTP 429: account \"acme\" has as many units queued as its limit allows (1, limits.max_queued_per_account)", 0},
		{"a wait over a minute", "3600", 100, 1, 255, "(try again in 3600s)", 0},
		{"a full disk", "", 100, 1, 255, "HTTP 507: the automator's database is out of disk space while queueing work", http.StatusInsufficientStorage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var keys []string
			automator := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var req struct {
					Key string `json:"idempotency_key"`
				}
				if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
					t.Errorf("request body: %v", err)
				}
				mu.Lock()
				keys = append(keys, req.Key)
				n := len(keys)
				mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				if n <= tc.refuse {
					if tc.retryAfter != "" {
						w.Header().Set("Retry-After", tc.retryAfter)
					}
					if tc.status == http.StatusInsufficientStorage {
						w.WriteHeader(tc.status)
						io.WriteString(w, diskFull)
						return
					}
					w.WriteHeader(http.StatusTooManyRequests)
					io.WriteString(w, refusal)
					return
				}
				io.WriteString(w, `{"work_id": "w_1", "state": "STATE_SUCCEEDED", "result": {"exit_code": 0, "stdout": "aGVsbG8K", "stderr": ""}}`)
			}))
			defer automator.Close()
			code, out, errs := runPython(t, py, append(os.Environ(), "AUTOMATOR_HTTP="+automator.URL, "AUTOMATOR_API_KEY=oak_x"), "", "hello.sh")
			lines := strings.Split(strings.TrimSpace(errs), "\n")
			if code != tc.code || !strings.Contains(out+lines[len(lines)-1], tc.lastLine) || strings.Contains(errs, "Traceback") {
				t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant %d, and %q last", code, out, errs, tc.code, tc.lastLine)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(keys) != tc.calls {
				t.Errorf("%d calls, want %d", len(keys), tc.calls)
			}
			for _, k := range keys {
				if k == "" || k != keys[0] {
					t.Errorf("idempotency keys %q: want one, the same in every call", keys)
					break
				}
			}
		})
	}
}

// runPython runs execute.py with args, env and stdin, and returns its exit
// code, stdout and stderr.
func runPython(t *testing.T, py string, env []string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(py, append([]string{"execute.py"}, args...)...)
	cmd.Env = env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("execute.py: %v", err)
	}
	return code, out.String(), errb.String()
}
