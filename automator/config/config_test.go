package config

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

func TestDefaultIsValidAndListensOnThePublicPort(t *testing.T) {
	c := Default("https://automator.example:9443")
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Listen != ":9443" || c.DefaultTimeout != 5*time.Minute {
		t.Fatalf("Default: %+v", c)
	}
}

func TestSaveLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	c := Default("https://h:1")
	c.LogFormat, c.DashboardRevealKeys = "json", []string{"admin", "ops"}
	if err := Save(dir, c); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("Load = %+v, %v; want %+v", got, err, c)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "automator init") {
		t.Fatalf("missing file: %v, want a hint to run init", err)
	}
	os.WriteFile(filepath.Join(dir, FileConfig), []byte("listen: :1\nlisten_http: x\n"), 0o644)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "listen_http") {
		t.Fatalf("unknown key: %v, want it named", err)
	}
}

// TestLoadRefusesAFractionForAWholeNumber: the YAML library would cut
// limits.max_stdin: 1.5 to 1 byte without a word; Load refuses it with its
// line, as it does a text there. A whole number written as a float passes.
func TestLoadRefusesAFractionForAWholeNumber(t *testing.T) {
	dir := t.TempDir()
	write := func(text string) {
		if err := os.WriteFile(filepath.Join(dir, FileConfig), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("listen: :1\nlimits:\n  max_stdin: 1.5\n")
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), `line 3: "1.5" is not a whole number`) {
		t.Errorf("max_stdin: 1.5: %v, want it refused naming its line", err)
	}
	write("listen: :1\nlimits:\n  max_stdin: 1e3\n")
	if c, err := Load(dir); err != nil || c.Limits.MaxStdin != 1000 {
		t.Errorf("max_stdin: 1e3: %v, max_stdin %d; want 1000", err, c.Limits.MaxStdin)
	}
}

func TestValidateNamesEveryBadField(t *testing.T) {
	c := Config{Listen: "nope", HTTPListen: "", PublicURL: "ftp://x", DB: "", DefaultTimeout: -1, PollWindow: time.Hour}
	err := c.Validate()
	for _, key := range []string{"listen:", "http_listen:", "public_url:", "db:", "default_timeout:", "poll_window:"} {
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("Validate does not name %s: %v", key, err)
		}
	}
}

// TestADatabaseURLOfAnotherSchemeIsRefused: db (and --db) is a SQLite
// file path, sqlite:PATH or a postgres:// URL. A URL of another scheme
// (another database, a misspelt postgres) is refused naming db and the
// scheme, and never its password, rather than taken for a SQLite file
// path whose directory is the scheme.
func TestADatabaseURLOfAnotherSchemeIsRefused(t *testing.T) {
	for _, db := range []string{"mysql://u:secret@db.example/automator", "postgress://u:secret@db.example/automator", "file:///var/lib/automator/automator.db"} {
		c := Default(DefaultPublicURL)
		c.DB = db
		err := c.Validate()
		scheme, _, _ := strings.Cut(db, "://")
		if err == nil || !strings.Contains(err.Error(), "db: unsupported database URL") || !strings.Contains(err.Error(), strconv.Quote(scheme)) {
			t.Errorf("db %q: %v; want it refused naming db and the scheme %q", db, err, scheme)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("db %q: %v; the error shows the password", db, err)
		}
	}
	for _, db := range []string{"automator.db", "/var/lib/automator/automator.db", "sqlite:other.db", "sqlite:///var/lib/automator/automator.db", "postgres://u@db.example/automator", "postgresql://u@db.example/automator", "PostgreSQL://u@db.example/automator", `C:\data\automator.db`, "dir/with://in-it.db"} {
		c := Default(DefaultPublicURL)
		c.DB = db
		if err := c.Validate(); err != nil {
			t.Errorf("db %q: %v; want it accepted", db, err)
		}
	}
}

// TestAPostgreSQLURLThatDoesNotParseIsRefused: a postgres:// URL whose
// password holds a character it must percent-encode (a %, a space) is
// refused as a URL that does not parse, never showing the password, rather
// than taken for a SQLite file path named after it.
func TestAPostgreSQLURLThatDoesNotParseIsRefused(t *testing.T) {
	for _, db := range []string{"postgres://u:S3cr%t!@db.example/automator", "postgresql://u:S3cr t@db.example:5432/automator", "postgres://u:S3cr%zz@db.example/automator"} {
		c := Default(DefaultPublicURL)
		c.DB = db
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "db: the postgres") || !strings.Contains(err.Error(), "does not parse") {
			t.Errorf("db %q: %v; want it refused naming db as a URL that does not parse", db, err)
		} else if strings.Contains(err.Error(), "S3cr") {
			t.Errorf("db %q: %v; the error shows the password", db, err)
		}
	}
	if err := CheckDB("postgres://u:S3cr%25t@db.example/automator"); err != nil {
		t.Errorf("a password percent-encoded: %v; want it accepted", err)
	}
}

// TestReplicaIDIsPrintableAndBounded: replica_id (or --replica-id) goes
// into the heartbeat records, `automator replicas` and every log line: one
// holding a newline or a terminal's escape, or past its bound, is refused.
func TestReplicaIDIsPrintableAndBounded(t *testing.T) {
	for _, id := range []string{"a\nb", "evil\x1b[31mRED", "zero\u200bwidth", "bad\xffutf8", strings.Repeat("r", MaxReplicaID+1)} {
		c := Default(DefaultPublicURL)
		c.ReplicaID = id
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "replica_id: ") {
			t.Errorf("replica_id %q: %v; want it refused naming replica_id", id, err)
		}
	}
	for _, id := range []string{"", "replica-1", "host ü-1", strings.Repeat("r", MaxReplicaID)} {
		c := Default(DefaultPublicURL)
		c.ReplicaID = id
		if err := c.Validate(); err != nil {
			t.Errorf("replica_id %q: %v; want it accepted", id, err)
		}
	}
}

func TestPlaintextOnlyOnLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{"127.0.0.1:1": true, "[::1]:1": true, "localhost:1": true, "LocalHost:1": true, "0.0.0.0:1": false, ":1": false, "10.1.2.3:1": false} {
		if err := RequireLoopback(addr); (err == nil) != ok {
			t.Errorf("RequireLoopback(%q) = %v, want ok=%v", addr, err, ok)
		}
	}
	c := Default("https://h:1")
	c.InsecurePlaintext = true
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("plaintext on all interfaces accepted: %v", err)
	}
}

// FuzzDecode: an automator.yaml the fuzzer writes is refused in one line,
// or each problem Validate finds is one line naming its setting, or, valid,
// it says the same after a trip through YAML (as Save writes it).
func FuzzDecode(f *testing.F) {
	f.Add([]byte("listen: :8443\nhttp_listen: 127.0.0.1:8080\npublic_url: https://h:8443\ndb: a.db\ndefault_timeout: 5m\npoll_window: 30s\n"))
	f.Add([]byte("insecure_plaintext: true\n"))
	f.Add([]byte("limits:\n  max_stdin: 4096\n  max_queued_per_account: -1\n  failed_auth_refill: 1h1s\n"))
	f.Add([]byte("---\n---\n"))
	f.Add([]byte("listen: 127.0.0.1:8443\nhttp_listen: 127.0.0.1:8080\nhttp_allowed_hosts: [\"*.corp.example\"]\npublic_url: http://127.0.0.1:8443\ndb: postgres://u@h/db\n" +
		"insecure_plaintext: true\ndefault_timeout: 1m\npoll_window: 100ms\nwork_retention: 720h\naudit_retention: 8760h\nlog_format: json\ndashboard_reveal_keys: [k_1]\nlimits:\n  max_args: 10\n"))
	f.Add([]byte("poll_window: \"30\\ns\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var c Config
		if err := Decode(data, &c); err != nil {
			if strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("Decode(%q) refused it in more than one line:\n%v", data, err)
			}
			return
		}
		_ = c.DBPath("/d")
		if err := c.Validate(); err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				name, _, ok := strings.Cut(line, ": ")
				if !ok || !slices.Contains(settingNames, name) {
					t.Fatalf("Validate of %q: a line names no setting: %q (of %q)", data, line, err)
				}
			}
			return
		}
		out, err := yaml.Marshal(c)
		if err != nil {
			t.Fatalf("a valid config does not encode: %v", err)
		}
		var back Config
		if err := Decode(out, &back); err != nil || !reflect.DeepEqual(c, back) || back.Validate() != nil {
			t.Fatalf("a valid config written back changed: %v\n%+v\n%+v", err, c, back)
		}
	})
}

// settingNames are the names of the file's settings (limits.NAME for a
// limit), which Validate's lines start with.
var settingNames = func() []string {
	var names []string
	add := func(ty reflect.Type, prefix string) {
		for i := range ty.NumField() {
			if tag := ty.Field(i).Tag.Get("yaml"); tag != "" {
				names = append(names, prefix+strings.Split(tag, ",")[0])
			}
		}
	}
	add(reflect.TypeFor[Config](), "")
	add(reflect.TypeFor[Limits](), "limits.")
	return names
}()

func TestLogFormatIsTextOrJSON(t *testing.T) {
	for format, ok := range map[string]bool{"": true, "text": true, "json": true, "xml": false} {
		c := Default("https://h:1")
		c.LogFormat = format
		if err := c.Validate(); (err == nil) != ok || (err != nil && !strings.Contains(err.Error(), "log_format")) {
			t.Errorf("log_format %q: %v, want valid %v", format, err, ok)
		}
	}
}

// TestHTTPAllowedHostsAreHostNames: an entry of http_allowed_hosts is a
// host name or *. and one; a port, a scheme, a path or a bare * would
// match no Host, or every one, and is refused naming the setting.
func TestHTTPAllowedHostsAreHostNames(t *testing.T) {
	for h, ok := range map[string]bool{
		"metrics.corp.example": true, "*.corp.example": true, "automator": true,
		"": false, "*": false, "*.": false, "host:8080": false, "https://host": false, "host/path": false,
		"a.*.example": false, ".corp.example": false, "a..example": false,
	} {
		c := Default("https://h:1")
		c.HTTPAllowedHosts = []string{h}
		if err := c.Validate(); (err == nil) != ok || (err != nil && !strings.Contains(err.Error(), "http_allowed_hosts: ")) {
			t.Errorf("http_allowed_hosts [%q]: %v, want valid %v", h, err, ok)
		}
	}
}

// TestWorkRetentionIsZeroOrADayOrMore: 0 keeps every unit; otherwise a
// unit must outlive its idempotency key's 24 hours.
func TestWorkRetentionIsZeroOrADayOrMore(t *testing.T) {
	for d, ok := range map[time.Duration]bool{0: true, 24 * time.Hour: true, 720 * time.Hour: true, time.Hour: false, -time.Hour: false} {
		c := Default("https://h:1")
		c.WorkRetention = d
		if err := c.Validate(); (err == nil) != ok || (err != nil && !strings.Contains(err.Error(), "work_retention: ")) {
			t.Errorf("work_retention %v: %v, want valid %v", d, err, ok)
		}
	}
}

// TestAuditRetentionIsZeroOrADayOrMore: 0 keeps every audit event;
// otherwise at least a day's.
func TestAuditRetentionIsZeroOrADayOrMore(t *testing.T) {
	for d, ok := range map[time.Duration]bool{0: true, 24 * time.Hour: true, 8760 * time.Hour: true, time.Hour: false, -time.Hour: false} {
		c := Default("https://h:1")
		c.AuditRetention = d
		if err := c.Validate(); (err == nil) != ok || (err != nil && !strings.Contains(err.Error(), "audit_retention: ")) {
			t.Errorf("audit_retention %v: %v, want valid %v", d, err, ok)
		}
	}
}

// TestSaveIsPrivate: the db setting may hold a PostgreSQL password.
func TestSaveIsPrivate(t *testing.T) {
	dir := t.TempDir()
	if err := Save(dir, Default("https://h:1")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, FileConfig))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("automator.yaml mode %v, want 0600", fi.Mode().Perm())
	}
}

// TestValidateHoldsEachBoundOnBothSides: from the default config, each
// duration at the edge of its range is accepted and one step past it, on
// either side, is refused naming the setting, and only it.
func TestValidateHoldsEachBoundOnBothSides(t *testing.T) {
	valid := Default("https://automator.example:8443")
	for _, tc := range []struct {
		name  string
		field string // "" when the value is within bounds
		set   func(*Config)
	}{
		{"default_timeout 0", "default_timeout", func(c *Config) { c.DefaultTimeout = 0 }},
		{"default_timeout 1ns", "", func(c *Config) { c.DefaultTimeout = 1 }},
		{"default_timeout 24h", "", func(c *Config) { c.DefaultTimeout = 24 * time.Hour }},
		{"default_timeout 24h1ns", "default_timeout", func(c *Config) { c.DefaultTimeout = 24*time.Hour + 1 }},
		{"poll_window 99ms", "poll_window", func(c *Config) { c.PollWindow = 99 * time.Millisecond }},
		{"poll_window 100ms", "", func(c *Config) { c.PollWindow = 100 * time.Millisecond }},
		{"poll_window 5m", "", func(c *Config) { c.PollWindow = 5 * time.Minute }},
		{"poll_window 5m1ns", "poll_window", func(c *Config) { c.PollWindow = 5*time.Minute + 1 }},
		{"http_max_connections -1", "http_max_connections", func(c *Config) { c.HTTPMaxConnections = -1 }},
		{"http_max_connections 1", "", func(c *Config) { c.HTTPMaxConnections = 1 }},
		{"http_max_connections max", "", func(c *Config) { c.HTTPMaxConnections = MaxHTTPConnections }},
		{"http_max_connections max+1", "http_max_connections", func(c *Config) { c.HTTPMaxConnections = MaxHTTPConnections + 1 }},
		{"dashboard_live_pages_per_key -1", "dashboard_live_pages_per_key", func(c *Config) { c.DashboardLivePagesPerKey = -1 }},
		{"dashboard_live_pages_per_key 1", "", func(c *Config) { c.DashboardLivePagesPerKey = 1 }},
		{"dashboard_live_pages_per_key max+1", "dashboard_live_pages_per_key", func(c *Config) { c.DashboardLivePagesPerKey = MaxHTTPConnections + 1 }},
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
}

// TestPublicURLIsHostAndPortOnly: public_url becomes every profile's
// automator_url, which a proxy takes as https://HOST:PORT and nothing
// more: a path, query or fragment would be ignored, a user name and
// password shown in every profile, and port 0 or above 65535 never
// dialled. Each is refused where it is set, with no password shown.
func TestPublicURLIsHostAndPortOnly(t *testing.T) {
	for _, u := range []string{"https://h.example:8443/automator", "https://h.example:8443?x=1", "https://admin:s3cret@h.example:8443", "https://h.example:0", "https://h.example:70000", "ftp://h.example:21"} {
		if _, err := PublicHost(u); err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("PublicHost(%q) = %v, want it refused without showing a password", u, err)
		}
	}
	for _, u := range []string{"https://h.example:8443", "https://h.example:8443/", "http://127.0.0.1:8443"} {
		if _, err := PublicHost(u); err != nil {
			t.Errorf("PublicHost(%q) = %v, want it accepted", u, err)
		}
	}
}

// TestPublicURLIsNotAWildcard: a wildcard host (a certificate's
// *.example.com) names no host to dial: refused, saying so.
func TestPublicURLIsNotAWildcard(t *testing.T) {
	for _, u := range []string{"https://*.example.com:8443", "https://*:8443"} {
		err := Default(u).Validate()
		if err == nil || !strings.Contains(err.Error(), "public_url:") || !strings.Contains(err.Error(), "a wildcard names no host") {
			t.Errorf("Default(%q).Validate() = %v, want public_url refused as a wildcard", u, err)
		}
	}
}

// TestPublicURLIsNotTheUnspecifiedAddress: 0.0.0.0 and :: mean every
// address to a listener and none to a dialler (each proxy would dial its
// own host): init and serve refuse them in public_url, naming them.
func TestPublicURLIsNotTheUnspecifiedAddress(t *testing.T) {
	for _, u := range []string{"https://0.0.0.0:8443", "https://[::]:8443", "https://[::ffff:0.0.0.0]:8443"} {
		err := Default(u).Validate()
		if err == nil || !strings.Contains(err.Error(), "public_url:") || !strings.Contains(err.Error(), "is no address a proxy can reach") {
			t.Errorf("Default(%q).Validate() = %v, want public_url refused as no address to reach", u, err)
		}
	}
	for _, u := range []string{"https://10.0.0.1:8443", "https://[2001:db8::1]:8443", "https://[::1]:8443"} {
		if _, err := PublicHost(u); err != nil {
			t.Errorf("PublicHost(%q) = %v, want it accepted", u, err)
		}
	}
}

// TestPublicURLHostOutsideASCIIIsGivenInItsASCIIForm: a certificate names
// hosts in ASCII only; init said so in x509's words ("cannot be encoded as
// an IA5String"). Now public_url is refused naming the form to give.
func TestPublicURLHostOutsideASCIIIsGivenInItsASCIIForm(t *testing.T) {
	_, err := PublicHost("https://bücher.example:8443")
	if err == nil || !strings.Contains(err.Error(), "give xn--bcher-kva.example") {
		t.Errorf("PublicHost with bücher.example = %v, want it refused naming xn--bcher-kva.example", err)
	}
	if _, err := PublicHost("https://xn--bcher-kva.example:8443"); err != nil {
		t.Errorf("PublicHost with xn--bcher-kva.example = %v, want it accepted", err)
	}
}

// TestPublicURLPortIsAPortNumber: init refuses a public URL whose port no
// listener can bind, saying so in one line, rather than writing a config
// that serve cannot use; a URL without a port is named once, not also as
// the empty listen address it leaves.
func TestPublicURLPortIsAPortNumber(t *testing.T) {
	for _, u := range []string{"https://h:0", "https://h:65536", "https://h:99999"} {
		err := Default(u).Validate()
		if err == nil || !strings.Contains(err.Error(), "public_url:") || !strings.Contains(err.Error(), "not a TCP port") || strings.Contains(err.Error(), "\n") {
			t.Errorf("Default(%q).Validate() = %v, want one line naming public_url and the port", u, err)
		}
	}
	if err := Default("https://h:65535").Validate(); err != nil {
		t.Errorf("port 65535: %v", err)
	}
	err := Default("https://h").Validate()
	if err == nil || !strings.Contains(err.Error(), "public_url:") || strings.Contains(err.Error(), "listen:") {
		t.Errorf("no port: %v, want public_url named alone", err)
	}
}

// TestLoadOfAFileWithoutSettingsSaysSo: an automator.yaml emptied (a
// truncated edit, a full disk) or left with comments only is refused
// saying so, not with the YAML library's "EOF".
func TestLoadOfAFileWithoutSettingsSaysSo(t *testing.T) {
	for name, body := range map[string]string{"empty": "", "comments only": "# automator settings\n\n"} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, FileConfig), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(dir)
		if err == nil || !strings.Contains(err.Error(), "no settings") || !strings.Contains(err.Error(), "automator.yaml") || strings.Contains(err.Error(), "EOF") {
			t.Errorf("Load of a file %s: %v; want it named and said to hold no settings", name, err)
		}
	}
}

// TestASettingLeftOutTakesItsDefault: an automator.yaml written by hand (or
// by configuration management) with public_url alone serves with the
// defaults init writes, as the README's table says, rather than being
// refused for settings it left out.
func TestASettingLeftOutTakesItsDefault(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileConfig), []byte("public_url: https://automator.example:9443\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := got.Validate(); err != nil {
		t.Fatalf("settings left out are refused: %v", err)
	}
	if want := Default("https://automator.example:9443"); !reflect.DeepEqual(got, want) {
		t.Fatalf("Load = %+v; want init's defaults %+v", got, want)
	}
}

// TestInitWritesNoHTTPHostOrConnectionSettings: the HTTP listener's
// http_allowed_hosts and http_max_connections are left out of the file
// init writes (their defaults are none and 1024), so an automator of a
// release before them, which refuses a setting it does not know, still
// reads a data directory made by this one.
func TestInitWritesNoHTTPHostOrConnectionSettings(t *testing.T) {
	dir := t.TempDir()
	if err := Save(dir, Default("https://automator.example:9443")); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, FileConfig))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"http_allowed_hosts", "http_max_connections"} {
		if strings.Contains(string(data), key) {
			t.Errorf("init's %s holds %s:\n%s", FileConfig, key, data)
		}
	}
}

// TestATrailingDocumentMarkerIsAcceptedButNotASecondDocument: an
// automator.yaml ending in "---" (configuration management writes one) is
// one document and loads; a second document with settings, which would be
// ignored, is refused, naming the file and the line of its "---".
func TestATrailingDocumentMarkerIsAcceptedButNotASecondDocument(t *testing.T) {
	load := func(body string) (Config, error) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, FileConfig), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return Load(dir)
	}
	for _, body := range []string{"public_url: https://h:9443\n---\n", "---\npublic_url: https://h:9443\n---\n# end\n"} {
		if c, err := load(body); err != nil || c.PublicURL != "https://h:9443" {
			t.Errorf("%q: %+v, %v; want it loaded", body, c, err)
		}
	}
	_, err := load("public_url: https://h:9443\n---\npoll_window: 10s\n")
	if err == nil || !strings.Contains(err.Error(), FileConfig) || !strings.Contains(err.Error(), `line 2: more than one YAML document: what follows this "---" would be ignored`) {
		t.Errorf("a second document with a setting: %v; want it refused, naming the file and line 2", err)
	}
}

// TestADatabasePathHoldingANULByteSaysSo: a NUL byte in db (a "\0"
// escape) is named as such, the path quoted, rather than found when serve
// opens its lock file, with the system's "invalid argument" about a path
// that looks right in a terminal.
func TestADatabasePathHoldingANULByteSaysSo(t *testing.T) {
	c := Default("https://localhost:8443")
	c.DB = "auto\x00mator.db"
	err := c.Validate()
	if err == nil || !strings.HasPrefix(err.Error(), "db: ") || strings.ContainsRune(err.Error(), 0) || !strings.Contains(err.Error(), `"auto\x00mator.db" holds a NUL byte`) {
		t.Errorf("db holding a NUL byte: %q; want one error naming db, the NUL byte, and the path quoted", err)
	}
	// A URL, which may hold a password, is not quoted.
	c.DB = "postgres://automator:s3cret@db.example/automator\x00"
	if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), "db: ") || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "NUL byte") {
		t.Errorf("db URL holding a NUL byte: %q; want one error naming db and the NUL byte, without the password", err)
	}
}

// TestAConfigLargerThanAnyIsRefusedUnread: automator.yaml is a few KiB;
// one past 1 MiB (a file written over it by mistake, a link to a device
// that never ends) is refused naming the limit, not read whole.
func TestAConfigLargerThanAnyIsRefusedUnread(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileConfig), []byte("# "+strings.Repeat("x", MaxFileSize)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "larger than 1 MiB") {
		// Without the bound, /dev/zero below would take the machine's memory.
		t.Fatalf("automator.yaml of %d bytes: %v; want it refused, naming the limit", MaxFileSize+3, err)
	}
	if _, err := os.Stat("/dev/zero"); err != nil {
		return
	}
	dir = t.TempDir()
	if err := os.Symlink("/dev/zero", filepath.Join(dir, FileConfig)); err != nil {
		t.Fatal(err)
	}
	// A device is refused before it is opened, as not a regular file
	// (secretfile.ReadRegularFile); the limit stays behind it.
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "a character device, not a regular file") {
		t.Errorf("automator.yaml a link to /dev/zero: %v; want it refused unopened, as not a regular file", err)
	}
}
