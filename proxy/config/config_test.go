package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/opsgate/opsgate/crypto"
)

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestUnknownKeyIsAnErrorNamingFileAndKey(t *testing.T) {
	p := write(t, "automator_url: https://a:1\ntokn: x\n")
	_, err := Load(p)
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "tokn") || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("Load: %v, want an error naming %s, line 2 and the key tokn", err, p)
	}
}

// TestRelativeScriptsDirIsRelativeToTheFile: `scripts_dir: scripts` names
// the directory beside the config file wherever the proxy is started (a
// service starts in / or System32), and an absolute one is kept as written.
func TestRelativeScriptsDirIsRelativeToTheFile(t *testing.T) {
	p := write(t, "scripts_dir: scripts\n")
	// Loaded by a relative path from elsewhere, as `proxy run --config
	// conf/proxy.yaml` is.
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, p)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load(rel)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(filepath.Dir(p), "scripts"); c.ScriptsDir != want || c.ScriptsDirWritten() != "scripts" {
		t.Errorf("scripts_dir: scripts read as %q (written %q), want %q", c.ScriptsDir, c.ScriptsDirWritten(), want)
	}
	abs := filepath.Join(t.TempDir(), "s")
	if c, err := Load(write(t, "scripts_dir: "+abs+"\n")); err != nil || c.ScriptsDir != abs || c.ScriptsDirWritten() != abs {
		t.Errorf("scripts_dir: %s read as %q (written %q), %v", abs, c.ScriptsDir, c.ScriptsDirWritten(), err)
	}
	if c, err := Load(write(t, "token: t\n")); err != nil || c.ScriptsDir != "" {
		t.Errorf("no scripts_dir read as %q, %v", c.ScriptsDir, err)
	}
}

func TestMalformedYAMLAndEmptyFileAreClearErrors(t *testing.T) {
	for body, want := range map[string]string{
		"automator_url: [unterminated\n": "parsing proxy config",
		"":                               "empty",
		"max_concurrency: many\n":        "line 1",
		// Not cut to a whole number: 4.5 is not 4, and 0.5 not the default.
		"token: t\nmax_concurrency: 4.5\n": `line 2: "4.5" is not a whole number`,
		"max_concurrency: 0.5\n":           `line 1: "0.5" is not a whole number`,
		"max_output_bytes: 2000.7\n":       `line 1: "2000.7" is not a whole number`,
	} {
		_, err := Load(write(t, body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load(%q): %v, want an error containing %q", body, err, want)
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

// TestValidateNamesEveryBadField: all problems at once, each by its key.
func TestValidateNamesEveryBadField(t *testing.T) {
	c := Config{
		AutomatorURL:   "ftp://x",
		Key:            "nope",
		ScriptsDir:     filepath.Join(t.TempDir(), "absent"),
		InstanceID:     strings.Repeat("i", 200),
		MaxConcurrency: 1000,
		MaxOutputBytes: 10,
		GracePeriod:    2 * time.Hour,
	}
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate accepted a bad config")
	}
	for _, key := range []string{"automator_url", "token", "key", "scripts_dir", "instance_id", "max_concurrency", "max_output_bytes", "grace_period"} {
		if !strings.Contains(err.Error(), key+":") {
			t.Errorf("Validate error does not name %s:\n%v", key, err)
		}
	}
	if strings.Contains(err.Error(), "nope") {
		t.Errorf("Validate echoes the key text: %v", err)
	}
}

func TestDefaultsApply(t *testing.T) {
	var c Config
	c.ApplyDefaults()
	if c.MaxConcurrency != DefaultMaxConcurrency || c.MaxOutputBytes != DefaultMaxOutput || c.GracePeriod != DefaultGracePeriod || c.InstanceID == "" {
		t.Fatalf("defaults not applied: %+v", c)
	}
}

func TestPlainHTTPNeedsNoCA(t *testing.T) {
	c := Config{AutomatorURL: "http://127.0.0.1:1"}
	if _, useTLS, err := c.Target(); err != nil || useTLS {
		t.Fatalf("Target: %v %v", useTLS, err)
	}
	c.AutomatorURL = "https://h:1"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "ca_cert:") {
		t.Fatalf("https without ca_cert: %v, want a ca_cert error", err)
	}
	c.CACert = "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "ca_cert:") {
		t.Fatalf("https with a broken ca_cert: %v, want a ca_cert error", err)
	}
}

// FuzzParse: a proxy.yaml the fuzzer writes (a profile as `automator
// account create` prints it, with local settings, or anything near it) is
// refused in one line, or its settings, once valid, say the same after a
// trip through YAML; each problem Validate finds is one line naming its
// setting. Parse and Validate read no more than the file.
func FuzzParse(f *testing.F) {
	const key = "2:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	f.Add([]byte("automator_url: https://a:1\ntoken: t\nkey: 1:abc\nscripts_dir: /x\nmax_concurrency: 3\ngrace_period: 10s\n"))
	f.Add([]byte("ca_cert: |\n  -----BEGIN CERTIFICATE-----\n  x\n"))
	f.Add([]byte("{}"))
	f.Add([]byte("automator_url: https://a:1\ntoken: t\nkey: " + key + "\nprevious_keys: [\"1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\", \"x\"]\npin_sha256: [\"sha256:00\"]\n"))
	f.Add([]byte("- a\n- b\n"))
	f.Add([]byte("automator_url: http://127.0.0.1:8443\ntoken: opt_x\nkey: " + key + "\nscripts_dir: .\ninstance_id: host-a\ngrace_period: 0s\nlog_format: json\n"))
	f.Add([]byte("automator_url: https://automator.example:8443\ntoken: opt_x\nkey: " + key + "\npin_sha256: [" + strings.Repeat("ab", 32) + "]\nscripts_dir: .\nstate_dir: /var/lib/opsgate-proxy\nmax_output_bytes: 2048\n"))
	f.Add([]byte("\xff\xfea\x00:\x00 \x00b\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("Parse(%q) refused it in more than one line:\n%v", data, err)
			}
			return
		}
		c.ApplyDefaults()
		if err := c.Validate(); err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				name, _, ok := strings.Cut(line, ": ")
				name, _, _ = strings.Cut(name, "[") // previous_keys[1]
				if !ok || !slices.Contains(settings, name) {
					t.Fatalf("Validate of %q: a line names no setting: %q (of %q)", data, line, err)
				}
			}
			return
		}
		out, err := yaml.Marshal(c)
		if err != nil {
			t.Fatalf("a valid config does not encode: %v", err)
		}
		back, err := Parse(out)
		if err != nil {
			t.Fatalf("a valid config written back does not parse: %v\n%s", err, out)
		}
		back.ApplyDefaults()
		c.gracePeriodSet, back.gracePeriodSet = false, false
		c.maxConcurrencySet, back.maxConcurrencySet = false, false
		c.maxOutputSet, back.maxOutputSet = false, false
		if !reflect.DeepEqual(c, back) || back.Validate() != nil {
			t.Fatalf("a valid config written back changed:\n%+v\n%+v", c, back)
		}
		_, _, _ = c.Target()
		_, _ = c.Keys()
		_, _ = c.Pins()
		_ = c.PlaintextToRemote()
	})
}

// settings are the names of the file's settings, which Validate's lines
// start with.
var settings = func() []string {
	var names []string
	ty := reflect.TypeFor[Config]()
	for i := range ty.NumField() {
		if tag := ty.Field(i).Tag.Get("yaml"); tag != "" {
			names = append(names, strings.Split(tag, ",")[0])
		}
	}
	return names
}()

// TestASecondDocumentIsAnError: settings after a "---" line would be a
// second YAML document, which a single decode ignores silently (here
// max_concurrency, with scripts_dir given as a flag); the file is refused
// instead, naming it. A "---" that opens the file, or one with nothing
// after it, is fine.
func TestASecondDocumentIsAnError(t *testing.T) {
	body := "automator_url: https://a:1\ntoken: t\n---\nmax_concurrency: 16\n"
	p := write(t, body)
	if c, err := Load(p); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), `line 3: more than one YAML document: what follows this "---" would be ignored`) {
		t.Fatalf("Load of a file with a second document: %+v, %v; want an error naming %s and the second document", c, err, p)
	}
	if c, err := Load(write(t, "---\n"+body[:strings.Index(body, "---")])); err != nil || c.Token != "t" {
		t.Fatalf("Load of one document opened by ---: %+v, %v", c, err)
	}
	if c, err := Load(write(t, body[:strings.Index(body, "max_")]+"# nothing more\n")); err != nil || c.Token != "t" {
		t.Fatalf("Load of one document and an empty one: %+v, %v", c, err)
	}
	if c, err := Load(write(t, body[:strings.Index(body, "max_")])); err != nil || c.Token != "t" {
		t.Fatalf("Load of one document and a trailing ---: %+v, %v", c, err)
	}
}

// TestGracePeriodZeroMeansNoGrace: `grace_period: 0s`, which Validate
// accepts, means a stop kills running scripts at once; only a config
// without grace_period gets the default 30 s.
func TestGracePeriodZeroMeansNoGrace(t *testing.T) {
	for body, want := range map[string]time.Duration{
		"grace_period: 0s\n": 0,
		"grace_period: 5s\n": 5 * time.Second,
		"token: t\n":         DefaultGracePeriod,
	} {
		c, err := Parse([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		c.ApplyDefaults()
		if c.GracePeriod != want {
			t.Errorf("%q: grace period %v after defaults, want %v", body, c.GracePeriod, want)
		}
	}
}

// TestAnExplicitZeroIsRefusedNotDefaulted: max_concurrency and
// max_output_bytes set to 0 in the file are refused, naming the setting, as
// any other value out of their range is, rather than taken for "unset" and
// given the default (max_concurrency: 0, meant to make an instance take no
// work, ran 4 units at once). Left out or null, they get the default.
func TestAnExplicitZeroIsRefusedNotDefaulted(t *testing.T) {
	key, err := crypto.NewKey(1)
	if err != nil {
		t.Fatal(err)
	}
	base := "automator_url: http://127.0.0.1:1\ntoken: t\nkey: " + key.String() + "\nscripts_dir: '" + t.TempDir() + "'\n"
	for line, field := range map[string]string{
		"max_concurrency: 0":  "max_concurrency",
		"max_output_bytes: 0": "max_output_bytes",
		"max_concurrency: ~":  "",
		"max_output_bytes: ~": "",
		"":                    "",
	} {
		c, err := Parse([]byte(base + line + "\n"))
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		c.ApplyDefaults()
		err = c.Validate()
		switch {
		case field == "" && err != nil:
			t.Errorf("%q: %v, want it accepted", line, err)
		case field == "" && (c.MaxConcurrency != DefaultMaxConcurrency || c.MaxOutputBytes != DefaultMaxOutput):
			t.Errorf("%q: max_concurrency %d, max_output_bytes %d; want the defaults", line, c.MaxConcurrency, c.MaxOutputBytes)
		case field != "" && (err == nil || !strings.HasPrefix(err.Error(), field+": 0 is outside")):
			t.Errorf("%q: %v, want %s refused as outside its range", line, err, field)
		}
	}
}

// TestValidateHoldsEachBoundOnBothSides: from a valid config, each setting
// at the edge of its range is accepted and one step past it, on either
// side, is refused naming the setting, and only it; so is each value a
// setting may not take beside one it may.
func TestValidateHoldsEachBoundOnBothSides(t *testing.T) {
	key, err := crypto.NewKey(1)
	if err != nil {
		t.Fatal(err)
	}
	scripts := t.TempDir()
	file := filepath.Join(scripts, "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	valid := Config{AutomatorURL: "http://127.0.0.1:1", Token: "t", Key: key.String(), ScriptsDir: scripts,
		InstanceID: "a", MaxConcurrency: 4, MaxOutputBytes: 1 << 20, GracePeriod: 30 * time.Second}
	if err := valid.Validate(); err != nil {
		t.Fatalf("the base config: %v", err)
	}
	for _, tc := range []struct {
		name  string
		field string // "" when the value is within bounds
		set   func(*Config)
	}{
		{"max_concurrency 0", "max_concurrency", func(c *Config) { c.MaxConcurrency = 0 }},
		{"max_concurrency 1", "", func(c *Config) { c.MaxConcurrency = 1 }},
		{"max_concurrency 256", "", func(c *Config) { c.MaxConcurrency = 256 }},
		{"max_concurrency 257", "max_concurrency", func(c *Config) { c.MaxConcurrency = 257 }},
		{"max_output_bytes 1023", "max_output_bytes", func(c *Config) { c.MaxOutputBytes = 1023 }},
		{"max_output_bytes 1024", "", func(c *Config) { c.MaxOutputBytes = 1024 }},
		{"max_output_bytes 2 MiB", "", func(c *Config) { c.MaxOutputBytes = 2 << 20 }},
		{"max_output_bytes 2 MiB + 1", "max_output_bytes", func(c *Config) { c.MaxOutputBytes = 2<<20 + 1 }},
		{"grace_period -1ns", "grace_period", func(c *Config) { c.GracePeriod = -1 }},
		{"grace_period 0", "", func(c *Config) { c.GracePeriod = 0 }},
		{"grace_period 1h", "", func(c *Config) { c.GracePeriod = time.Hour }},
		{"grace_period 1h1ns", "grace_period", func(c *Config) { c.GracePeriod = time.Hour + 1 }},
		{"scripts_dir a file", "scripts_dir", func(c *Config) { c.ScriptsDir = file }},
		{"log_format text", "", func(c *Config) { c.LogFormat = "text" }},
		{"log_format json", "", func(c *Config) { c.LogFormat = "json" }},
		{"log_format xml", "log_format", func(c *Config) { c.LogFormat = "xml" }},
		{"instance_id empty", "instance_id", func(c *Config) { c.InstanceID = "" }},
		{"instance_id of 128 bytes", "", func(c *Config) { c.InstanceID = strings.Repeat("i", MaxInstanceID) }},
		{"instance_id of 129 bytes", "instance_id", func(c *Config) { c.InstanceID = strings.Repeat("i", MaxInstanceID+1) }},
		{"instance_id beyond ASCII", "", func(c *Config) { c.InstanceID = "hôte-名" }},
		{"instance_id not UTF-8", "instance_id", func(c *Config) { c.InstanceID = "h\xffst" }},
		{"instance_id with a control character", "instance_id", func(c *Config) { c.InstanceID = "a\tb" }},
		{"instance_id with a zero-width space", "instance_id", func(c *Config) { c.InstanceID = "host-a\u200b" }},
		{"instance_id with a bidi override", "instance_id", func(c *Config) { c.InstanceID = "host-\u202ea" }},
		{"instance_id with a line separator", "instance_id", func(c *Config) { c.InstanceID = "host\u2028a" }},
		{"instance_id with a space", "", func(c *Config) { c.InstanceID = "rack 3" }},
		{"automator_url ftp", "automator_url", func(c *Config) { c.AutomatorURL = "ftp://127.0.0.1:1" }},
		{"token as printed", "", func(c *Config) { c.Token = "opt_wxxagtpgf9qjHvnbxFcZce-NGR3GRbFdsS4-D3oAdac" }},
		{"token with a line break", "token", func(c *Config) { c.Token = "opt_x\r" }},
		{"token with a space", "token", func(c *Config) { c.Token = "opt_x y" }},
		{"token beyond ASCII", "token", func(c *Config) { c.Token = "opt_\u00e9" }},
		{"ca_cert a certificate", "", func(c *Config) { c.AutomatorURL, c.CACert = "https://127.0.0.1:1", certPEM(t, "CERTIFICATE") }},
		{"ca_cert a certificate labelled otherwise", "ca_cert", func(c *Config) { c.AutomatorURL, c.CACert = "https://127.0.0.1:1", certPEM(t, "PUBLIC KEY") }},
		// No PEM block at all: a file's path given for its contents, say.
		{"ca_cert not PEM", "ca_cert", func(c *Config) { c.AutomatorURL, c.CACert = "https://127.0.0.1:1", "/etc/opsgate/ca.pem" }},
		// Every block is trusted, so each must be a certificate.
		{"ca_cert two certificates", "", func(c *Config) {
			c.AutomatorURL, c.CACert = "https://127.0.0.1:1", certPEM(t, "CERTIFICATE")+certPEM(t, "CERTIFICATE")
		}},
		{"ca_cert a certificate and a key", "ca_cert", func(c *Config) {
			c.AutomatorURL, c.CACert = "https://127.0.0.1:1", certPEM(t, "CERTIFICATE")+certPEM(t, "PRIVATE KEY")
		}},
		{"ca_cert a certificate and a broken one", "ca_cert", func(c *Config) {
			c.AutomatorURL, c.CACert = "https://127.0.0.1:1", certPEM(t, "CERTIFICATE")+"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
		}},
	} {
		c := valid
		tc.set(&c)
		err := c.Validate()
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: %v, want it accepted", tc.name, err)
		case tc.field != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.field+":") || strings.Contains(err.Error(), "\n")):
			t.Errorf("%s: %v, want one error naming %s", tc.name, err, tc.field)
		}
	}
	// Left out, scripts_dir is said to be required, not to be missing.
	c := valid
	c.ScriptsDir = ""
	if err := c.Validate(); err == nil || err.Error() != "scripts_dir: required (in the config file, or as proxy run's --scripts-dir)" {
		t.Errorf("scripts_dir left out: %v, want it said required", err)
	}
}

// certPEM is a self-signed certificate in a PEM block of type typ.
func certPEM(t *testing.T, typ string) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
}

// TestAConfigLargerThanAnyIsRefusedUnread: a proxy config is a few KiB.
// A path to something much larger (a log file given by mistake, a device
// that never ends such as /dev/zero) is refused once 1 MiB has been read,
// naming the limit, rather than read whole: /dev/zero was read until the
// system killed the proxy for its memory, tens of GiB later, and the
// stop signals sent meanwhile did nothing.
func TestAConfigLargerThanAnyIsRefusedUnread(t *testing.T) {
	// Without the bound, /dev/zero would take the machine's memory: it is
	// read only once a file over the limit is refused.
	if !t.Run("file", func(t *testing.T) {
		p := write(t, "# "+strings.Repeat("x", MaxFileSize)+"\n")
		if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "larger than 1 MiB") {
			t.Errorf("a config of %d bytes: %v; want it refused, naming the limit", MaxFileSize+3, err)
		}
		p = write(t, "# "+strings.Repeat("x", MaxFileSize-3)+"\n")
		if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "empty") {
			t.Errorf("a config of exactly %d bytes, all comment: %v; want it read (and found empty)", MaxFileSize, err)
		}
	}) {
		return
	}
	t.Run("endless", func(t *testing.T) {
		if _, err := os.Stat("/dev/zero"); err != nil {
			t.Skip("no /dev/zero here")
		}
		// A device is refused before it is opened, as not a regular file
		// (secretfile.ReadRegularFile); the limit stays behind it.
		if _, err := Load("/dev/zero"); err == nil || !strings.Contains(err.Error(), "a character device, not a regular file") {
			t.Errorf("/dev/zero as the config: %v; want it refused unopened, as not a regular file", err)
		}
	})
}

// TestScriptsDirRelativeToNoDirectoryIsNotJoined: on Windows, "\scripts"
// and "C:scripts" are relative paths, but not to a directory a file lies
// in: joined under the config's directory they would name nothing
// (…\conf\C:scripts). Elsewhere every relative path is a directory's.
func TestScriptsDirRelativeToNoDirectoryIsNotJoined(t *testing.T) {
	cases := map[string]bool{"scripts": true, "../scripts": true}
	if runtime.GOOS == "windows" {
		cases[`..\scripts`] = true
		cases[`\scripts`] = false
		cases[`C:scripts`] = false
	}
	for p, want := range cases {
		if got := fromFile(p); got != want {
			t.Errorf("fromFile(%q) = %v, want %v", p, got, want)
		}
	}
}

// TestAllowedEnvIsReadAndChecked: allowed_env is a list of names and
// NAME_* prefixes; an entry that names no variable (a '*' inside) is
// refused, naming the setting and the entry. One that allows nothing (a
// name refused for every command) is valid: the proxy warns of it as it
// starts, so that a release that refuses more does not stop a proxy.
func TestAllowedEnvIsReadAndChecked(t *testing.T) {
	key, err := crypto.NewKey(1)
	if err != nil {
		t.Fatal(err)
	}
	base := "automator_url: http://127.0.0.1:1\ntoken: t\nkey: " + key.String() + "\nscripts_dir: '" + t.TempDir() + "'\n"
	for line, says := range map[string]string{
		"allowed_env: [DEPLOY_TARGET, APP_*]": "",
		"allowed_env: [DEPLOY_TARGET, PATH]":  "",
		"allowed_env: ['A*B']":                "allowed_env: \"A*B\": '*' may only end an entry",
	} {
		c, err := Parse([]byte(base + line + "\n"))
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		c.ApplyDefaults()
		err = c.Validate()
		if says == "" {
			if err != nil || len(c.AllowedEnv) != 2 {
				t.Errorf("%q: %v, allowed_env %q; want it read as written", line, err, c.AllowedEnv)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%q: Validate = %v, want an error saying %q", line, err, says)
		}
	}
}
