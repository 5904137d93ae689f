//go:build linux

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/pki"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// auditEvent is a line of `automator audit --json`.
type auditEvent struct {
	Kind       string `json:"kind"`
	Actor      string `json:"actor"`
	Source     string `json:"source"`
	Account    string `json:"account"`
	WorkID     string `json:"work_id"`
	InstanceID string `json:"instance_id"`
	Outcome    string `json:"outcome"`
	Script     string `json:"script"`
	Detail     string `json:"detail"`
}

// TestAuditLogListsExecutionsAndFailuresWithoutSecrets: after executions
// with distinctive arguments, stdin, env and output, auth failures of a
// proxy and a caller, rotations and API key changes, `automator audit`
// lists each of them (who, from where, what, the outcome and the claimer)
// and none of the secrets: no token, API key, account or master key, no
// argument, stdin, env or output. The script name is shown by the command
// (which holds the master key) but is in the database only sealed.
func TestAuditLogListsExecutionsAndFailuresWithoutSecrets(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	profile := a.createAccount(t, "acme")
	scripts, dir := t.TempDir(), t.TempDir()
	const script = "audit-SCRIPTNAME-CANARY.sh"
	writeScript(t, scripts, script, `read line; echo "OUTPUT-CANARY $ENV_CANARY"; echo "STDERR-CANARY $line" >&2`)
	stdin := filepath.Join(dir, "stdin")
	writeFile(t, stdin, "STDIN-CANARY\n")
	// The variable the command below sets, which a proxy runs only when
	// its allowed_env lists it.
	if b, err := os.ReadFile(profile); err != nil || os.WriteFile(profile, append(b, "allowed_env: [ENV_CANARY]\n"...), 0o600) != nil {
		t.Fatal("adding allowed_env to the profile", err)
	}
	startProxy(t, profile, scripts, "host-a").WaitPolling(t)

	if r := a.Exec("--account", "acme", "--timeout", "20s", "--stdin", stdin, script, "ARG-CANARY"); r.Code != 0 || !strings.Contains(r.Stdout, "OUTPUT-CANARY") {
		t.Fatalf("exec: %v", r)
	}
	c := a.Client(t)
	ctx := context.Background()
	st, err := c.ExecuteOnProxy(ctx, &automatorv1.ExecuteRequest{Account: "acme", Command: &automatorv1.Command{
		Script: script, Stdin: []byte("STDIN-CANARY\n"), Env: map[string]string{"ENV_CANARY": "ENVVALUE-CANARY"}}})
	if err != nil || st.GetState() != automatorv1.State_STATE_SUCCEEDED || !bytes.Contains(st.GetResult().GetStdout(), []byte("ENVVALUE-CANARY")) {
		t.Fatalf("execute with env: %v, %v", st, err)
	}

	// Over HTTP: the audit names the HTTP client's address, not the gateway.
	adminKey, _ := os.ReadFile(filepath.Join(a.DataDir, config.FileAPIKey))
	req, _ := http.NewRequest("POST", "http://"+a.HTTPAddr+"/v1/accounts/acme/submit", strings.NewReader(`{"command": {"script": "`+script+`"}}`))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(adminKey)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var viaHTTP struct {
		WorkID string `json:"work_id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&viaHTTP)
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	if err != nil || resp.StatusCode != http.StatusOK || viaHTTP.WorkID == "" {
		t.Fatalf("submit over HTTP: status %d, %v", resp.StatusCode, err)
	}

	// A proxy with a wrong token, and a caller with a wrong API key.
	token := profileValue(t, profile, "token")
	wrongToken := token[:len(token)-4] + "ZZZZ"
	data, _ := os.ReadFile(profile)
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, strings.Replace(string(data), token, wrongToken, 1))
	startProxy(t, bad, scripts, "bad")
	waitFor(t, 15*time.Second, "the wrong token to be refused", func() bool { return strings.Contains(a.Log(), "invalid account token") })
	wrongKeyFile := filepath.Join(dir, "wrong.apikey")
	writeFile(t, wrongKeyFile, "oak_WRONGAPIKEY-CANARY\n")
	if r := runCLI(bin.automator, "exec", "--server", a.publicURL(), "--api-key-file", wrongKeyFile, "--ca", filepath.Join(a.DataDir, config.FileCACert), "--account", "acme", "x.sh"); r.Code != 255 {
		t.Fatalf("exec with a wrong API key: %v", r)
	}

	// Rotations and API key changes: their secrets must not leak either.
	p2 := a.rotate(t, "rotate-token", "acme", "1h")
	p3 := a.rotate(t, "rotate-key", "acme", "1h")
	created := runCLI(bin.automator, "apikey", "create", "ci", "--accounts", "acme", "--data-dir", a.DataDir)
	if created.Code != 0 {
		t.Fatalf("apikey create: %v", created)
	}
	id := strings.Fields(strings.TrimPrefix(created.Stderr, "automator: API key "))[0]
	if r := runCLI(bin.automator, "apikey", "revoke", id, "--data-dir", a.DataDir); r.Code != 0 {
		t.Fatalf("apikey revoke: %v", r)
	}

	r := runCLI(bin.automator, "audit", "--data-dir", a.DataDir, "--json")
	if r.Code != 0 {
		t.Fatalf("automator audit --json: %v", r)
	}
	var events []auditEvent
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		var e auditEvent
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
		events = append(events, e)
	}
	has := func(what string, match func(auditEvent) bool) {
		t.Helper()
		for _, e := range events {
			if match(e) {
				return
			}
		}
		t.Errorf("the audit log has no %s:\n%s", what, r.Stdout)
	}
	has("execution queued by the admin key, with its script", func(e auditEvent) bool {
		return e.Kind == "work.queued" && e.Actor == "apikey:admin" && e.Source == "127.0.0.1" && e.Account == "acme" && e.WorkID != "" && e.Script == script
	})
	has("execution queued over HTTP, from the HTTP client's address", func(e auditEvent) bool {
		return e.Kind == "work.queued" && e.WorkID == viaHTTP.WorkID && e.Source == "127.0.0.1" && e.Actor == "apikey:admin"
	})
	has("execution ended on host-a", func(e auditEvent) bool {
		return e.Kind == "work.ended" && e.Outcome == "succeeded" && e.InstanceID == "host-a" && e.WorkID == st.GetWorkId()
	})
	// Naming the instance the proxy runs as, which it says on every call.
	has("refused proxy token, naming its instance", func(e auditEvent) bool {
		return e.Kind == "auth.failed" && e.Source == "127.0.0.1" && strings.Contains(e.Detail, "ProxyService/Poll") &&
			strings.Contains(e.Detail, "invalid account token") && strings.Contains(e.Detail, "(instance bad)")
	})
	has("refused API key", func(e auditEvent) bool {
		return e.Kind == "auth.failed" && strings.Contains(e.Detail, "AutomatorService/") && strings.Contains(e.Detail, "invalid API key")
	})
	for _, kind := range []string{"account.created", "account.token_rotated", "account.key_rotated", "apikey.created", "apikey.revoked"} {
		has(kind, func(e auditEvent) bool { return e.Kind == kind && strings.HasPrefix(e.Actor, "cli") })
	}
	text := runCLI(bin.automator, "audit", "--data-dir", a.DataDir, "--since", "1h")
	// At least the JSON listing's lines: the proxy with the wrong token keeps
	// retrying, so a refusal may land between the two listings.
	if text.Code != 0 || strings.Count(text.Stdout, "\n") < len(events) || !strings.Contains(text.Stdout, "script="+script) {
		t.Errorf("automator audit (text): %v; want at least %d lines naming the script", text, len(events))
	}

	// None of the secrets, in the audit output or in the database files.
	secrets := map[string]string{
		"argument": "ARG-CANARY", "stdin": "STDIN-CANARY", "env value": "ENVVALUE-CANARY",
		"stdout": "OUTPUT-CANARY", "stderr": "STDERR-CANARY", "wrong token": wrongToken, "wrong API key": "WRONGAPIKEY-CANARY",
		"new API key": strings.TrimSpace(created.Stdout),
	}
	for i, p := range []string{profile, p2, p3} {
		secrets[fmt.Sprintf("token of profile %d", i+1)] = profileValue(t, p, "token")
		_, keyText, _ := strings.Cut(profileValue(t, p, "key"), ":")
		secrets[fmt.Sprintf("key of profile %d", i+1)] = keyText
	}
	for name, file := range map[string]string{"admin API key": config.FileAPIKey, "master key": config.FileMasterKey} {
		b, err := os.ReadFile(filepath.Join(a.DataDir, file))
		if err != nil {
			t.Fatal(err)
		}
		secrets[name] = strings.TrimSpace(string(b))
	}
	for what, s := range secrets {
		if len(s) < 8 {
			t.Fatalf("%s is too short to search for: %q", what, s)
		}
		if strings.Contains(r.Stdout, s) || strings.Contains(text.Stdout, s) {
			t.Errorf("automator audit shows the %s", what)
		}
	}
	secrets["script name"] = "SCRIPTNAME-CANARY"
	files, _ := filepath.Glob(filepath.Join(a.DataDir, config.FileDB+"*"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for what, s := range secrets {
			if bytes.Contains(data, []byte(s)) {
				t.Errorf("%s holds the %s in plaintext", filepath.Base(f), what)
			}
		}
		for i := 1; i <= 3; i++ {
			_, keyText, _ := strings.Cut(profileValue(t, []string{profile, p2, p3}[i-1], "key"), ":")
			raw, _ := base64.RawURLEncoding.DecodeString(keyText)
			if bytes.Contains(data, raw) {
				t.Errorf("%s holds the raw key of profile %d", filepath.Base(f), i)
			}
		}
	}
}

// TestConfiguredLimitsAndQueueCapKeepOthersServed: limits set in
// automator.yaml are enforced with an error naming the setting, a full
// account queue refuses more with ResourceExhausted, counted in /metrics,
// and the automator keeps serving every other account.
func TestConfiguredLimitsAndQueueCapKeepOthersServed(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	acme := a.createAccount(t, "acme")
	a.createAccount(t, "globex")
	a.proc.Kill(t)
	cfg, err := config.Load(a.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Limits.MaxStdin, cfg.Limits.MaxQueuedPerAccount = 1024, 2
	if err := config.Save(a.DataDir, cfg); err != nil {
		t.Fatal(err)
	}
	a.Restart(t)

	big := filepath.Join(t.TempDir(), "big")
	writeFile(t, big, strings.Repeat("x", 2048))
	if r := a.Exec("--account", "acme", "--timeout", "20s", "--stdin", big, "x.sh"); r.Code != 255 || !strings.Contains(r.Stderr, "limits.max_stdin") || !strings.Contains(r.Stderr, "1024") {
		t.Fatalf("exec with 2 KiB of stdin over max_stdin 1024: %v; want exit 255 naming limits.max_stdin", r)
	}
	c := a.Client(t)
	ctx := context.Background()
	submit := func(account string) error {
		_, err := c.Submit(ctx, &automatorv1.ExecuteRequest{Account: account, Command: &automatorv1.Command{Script: "hello.sh"}})
		return err
	}
	for range 2 {
		if err := submit("acme"); err != nil {
			t.Fatal(err)
		}
	}
	if err := submit("acme"); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "max_queued_per_account") {
		t.Fatalf("a 3rd queued unit on acme: %v; want ResourceExhausted naming max_queued_per_account", err)
	}
	if err := submit("globex"); err != nil {
		t.Fatalf("globex while acme's queue is full: %v", err)
	}
	resp, err := http.Get("http://" + a.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	if want := `automator_work_refused_total{account="acme",reason="queue_full"} 1` + "\n"; !strings.Contains(string(body), want) {
		t.Errorf("/metrics after one unit refused for acme's full queue lacks %q:\n%s", want, body)
	}
	scripts := t.TempDir()
	writeScript(t, scripts, "hello.sh", `echo hello`)
	startProxy(t, acme, scripts, "a")
	waitFor(t, 20*time.Second, "acme's queue to drain", func() bool { return submit("acme") == nil })
}

// TestOversizedMessageIsRefusedAndOthersServed: a gRPC message over the
// 8 MiB limit gets ResourceExhausted saying so, an HTTP body over the
// gateway's limit a 4xx, and the automator keeps serving.
func TestOversizedMessageIsRefusedAndOthersServed(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	a.createAccount(t, "acme")
	c := a.Client(t)
	ctx := context.Background()
	_, err := c.Submit(ctx, &automatorv1.ExecuteRequest{Account: "acme", Command: &automatorv1.Command{Script: "x.sh", Stdin: make([]byte, config.MaxMessage+1)}})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "larger than max") {
		t.Fatalf("a 8 MiB + 1 message: %v; want ResourceExhausted saying it is larger than the max", err)
	}
	if _, err := c.Submit(ctx, &automatorv1.ExecuteRequest{Account: "acme", Command: &automatorv1.Command{Script: "x.sh"}}); err != nil {
		t.Fatalf("a normal submit after the oversized one: %v", err)
	}

	key, _ := os.ReadFile(filepath.Join(a.DataDir, config.FileAPIKey))
	body := `{"command": {"script": "x.sh", "stdin": "` + strings.Repeat("A", 2*config.MaxMessage+16) + `"}}`
	req, _ := http.NewRequest("POST", "http://"+a.HTTPAddr+"/v1/accounts/acme/submit", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(key)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode < 400 || resp.StatusCode > 499 {
		t.Fatalf("an HTTP body over the limit: status %d, want 4xx", resp.StatusCode)
	}
	req, _ = http.NewRequest("POST", "http://"+a.HTTPAddr+"/v1/accounts/acme/submit", strings.NewReader(`{"command": {"script": "x.sh"}}`))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(key)))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a normal HTTP submit after the oversized one: status %d", resp.StatusCode)
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestPlaintextIsRefusedOffLoopback: `serve --insecure-plaintext` on an
// address that is not loopback exits at once with a one-line reason.
func TestPlaintextIsRefusedOffLoopback(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	if r := runCLI(bin.automator, "init", "--data-dir", dir); r.Code != 0 {
		t.Fatalf("init: %v", r)
	}
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0"} {
		r := runCLI(bin.automator, "serve", "--data-dir", dir, "--insecure-plaintext", "--listen", addr, "--http-listen", "127.0.0.1:0")
		if r.Code != 255 || !strings.Contains(r.Stderr, "loopback") || strings.Count(r.Stderr, "\n") != 1 {
			t.Errorf("serve --insecure-plaintext --listen %s: %v; want exit 255 and one line saying loopback only", addr, r)
		}
	}
}

// TestRenewedCertificateIsServedWithoutRestart: `automator cert renew`
// puts a new server certificate in place; the running automator serves it
// to new connections within seconds, and proxies keep working.
func TestRenewedCertificateIsServedWithoutRestart(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	profile := a.createAccount(t, "acme")
	scripts := t.TempDir()
	writeScript(t, scripts, "hello.sh", `echo hello`)
	startProxy(t, profile, scripts, "a").WaitPolling(t)
	caPEM, _ := os.ReadFile(filepath.Join(a.DataDir, config.FileCACert))
	cfg, err := pki.ClientTLS(caPEM, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	serial := func() string {
		c, err := tls.Dial("tcp", a.GRPCAddr, cfg)
		if err != nil {
			t.Fatalf("TLS handshake with the automator: %v", err)
		}
		defer c.Close()
		if v := c.ConnectionState().Version; v != tls.VersionTLS13 {
			t.Errorf("negotiated TLS version %x, want TLS 1.3", v)
		}
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := serial()
	if r := runCLI(bin.automator, "cert", "renew", "--data-dir", a.DataDir); r.Code != 0 {
		t.Fatalf("cert renew: %v", r)
	}
	waitFor(t, 3*pki.DefaultReloadEvery, "the renewed certificate to be served", func() bool { return serial() != before })
	if !strings.Contains(a.Log(), "renewed server certificate loaded") {
		t.Errorf("the automator did not log the reload")
	}
	if r := a.Exec("--account", "acme", "--timeout", "20s", "hello.sh"); r.Code != 0 {
		t.Fatalf("exec after the renewal: %v", r)
	}
}
