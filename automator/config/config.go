// Package config reads and writes the automator's data directory: the
// automator.yaml settings file and the files `automator init` makes beside it
// (master key, CA, server certificate, admin API key).
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
	"golang.org/x/net/idna"

	"github.com/opsgate/opsgate/internal/hostport"
	"github.com/opsgate/opsgate/internal/printable"
	"github.com/opsgate/opsgate/internal/secretfile"
	"github.com/opsgate/opsgate/internal/yamlerr"
)

// Names of the files in a data directory.
const (
	FileConfig    = "automator.yaml"
	FileMasterKey = "master.key"
	FileCACert    = "ca.pem"
	FileCAKey     = "ca.key"
	FileCert      = "server.pem"
	FileKey       = "server.key"
	FileAPIKey    = "admin.apikey"
	FileDB        = "automator.db"
	// FileServing is written by serve once it listens: the addresses it
	// actually bound (useful with port 0), read by exec with --data-dir.
	// serve removes it when it stops.
	FileServing = "serving.yaml"
	// FileServeLock is locked by every running serve of the directory and
	// every command while it has the directory's database open (shared),
	// and by restore (exclusive): a restore never replaces a database that
	// a serve or a command has open, and neither starts during one.
	FileServeLock = "serve.lock"
)

// Defaults.
const (
	DefaultTimeout    = 5 * time.Minute
	DefaultPollWindow = 30 * time.Second
	DefaultHTTPListen = "127.0.0.1:8080"
	// DefaultHTTPMaxConnections is http_max_connections left out.
	DefaultHTTPMaxConnections = 1024
	// DefaultDashboardLivePagesPerKey is dashboard_live_pages_per_key
	// left out.
	DefaultDashboardLivePagesPerKey = 64
	DefaultPublicURL                = "https://localhost:8443"
)

// Config is automator.yaml. Flags of `automator serve` override it.
type Config struct {
	// Listen is the gRPC address, host:port. Defaults to all interfaces on
	// the public URL's port.
	Listen string `yaml:"listen"`
	// HTTPListen is the plain HTTP address of /healthz, /readyz, /metrics,
	// the dashboard and the HTTP/JSON API; loopback by default.
	HTTPListen string `yaml:"http_listen"`
	// HTTPAllowedHosts are names the HTTP listener answers to beside the
	// ones it always does (IP addresses, localhost, this host's name, the
	// http_listen and public_url hosts, the server certificate's names):
	// "name" or "*.domain" for every name under it. A request for another
	// Host is refused, so a web page cannot read the listener through a
	// name of its own resolved to it (DNS rebinding).
	HTTPAllowedHosts []string `yaml:"http_allowed_hosts,omitempty"`
	// HTTPMaxConnections caps the HTTP listener's open connections; 0
	// (left out, and not written by init, so an older automator still
	// reads the file) is DefaultHTTPMaxConnections. Past it, new ones wait
	// in the kernel's queue until one closes, so the HTTP side cannot take
	// the file descriptors gRPC's connections need.
	HTTPMaxConnections int `yaml:"http_max_connections,omitempty"`
	// PublicURL is how proxies reach this automator, https://HOST:PORT. It
	// goes into every profile and names the server certificate's host.
	PublicURL string `yaml:"public_url"`
	// DB is the store: a SQLite file path (relative to the data directory),
	// or "sqlite:PATH", or a postgres:// URL (replicas sharing a database).
	DB string `yaml:"db"`
	// ReplicaID names this automator among replicas sharing one database.
	ReplicaID string `yaml:"replica_id,omitempty"`
	// InsecurePlaintext serves gRPC without TLS. Allowed on loopback only.
	InsecurePlaintext bool `yaml:"insecure_plaintext,omitempty"`
	// DefaultTimeout is a unit's time from queueing to its deadline when the
	// caller gives none.
	DefaultTimeout time.Duration `yaml:"default_timeout"`
	// PollWindow is how long a Poll waits for work before returning empty
	// (plus up to 10 % jitter; a window of 5 s or more then ends on a
	// multiple of 250 ms, so idle polls end together).
	PollWindow time.Duration `yaml:"poll_window"`
	// Limits bound commands and abuse (limits.go); defaults when left out.
	Limits Limits `yaml:"limits,omitempty"`
	// LogFormat is how serve logs on stderr: "text" (the default) or
	// "json", one object per line.
	LogFormat string `yaml:"log_format,omitempty"`
	// DashboardRevealKeys are the ids of the API keys whose dashboard
	// sessions may see script names, arguments and output. None by default.
	DashboardRevealKeys []string `yaml:"dashboard_reveal_keys,omitempty"`
	// DashboardLivePagesPerKey bounds the live dashboard pages one API
	// key's sessions hold open on this replica at once; 0 (left out) is
	// DefaultDashboardLivePagesPerKey. Each reads the store at every
	// refresh; a page past it stays as loaded, and says so.
	DashboardLivePagesPerKey int `yaml:"dashboard_live_pages_per_key,omitempty"`
	// WorkRetention, when set, is how long ended units are kept after they
	// were queued: serve deletes older ones every hour (their audit
	// records stay). Zero, the default, keeps every unit.
	WorkRetention time.Duration `yaml:"work_retention,omitempty"`
	// AuditRetention, when set, is how long audit events are kept: serve
	// deletes older ones every hour, and records that it did (an
	// audit.purged event). Zero, the default, keeps every event.
	AuditRetention time.Duration `yaml:"audit_retention,omitempty"`
}

// MaxHTTPConnections bounds http_max_connections.
const MaxHTTPConnections = 1 << 20

// checkAllowedHost refuses an entry of http_allowed_hosts that is not a
// host name, or "*." and one: a port, a scheme or a path there would
// match no request, and a bare "*" would turn the check off.
func checkAllowedHost(h string) error {
	name := strings.TrimPrefix(h, "*.")
	if name == "" || strings.ContainsAny(name, ":/*@ ") || strings.HasPrefix(name, ".") || strings.Contains(name, "..") {
		return fmt.Errorf("%q is not a host name, or *. and one (no scheme, port or path)", h)
	}
	return nil
}

// MinWorkRetention is the shortest WorkRetention: a unit's idempotency key
// binds it for 24 hours, and the unit must outlive that.
const MinWorkRetention = 24 * time.Hour

// MinAuditRetention is the shortest AuditRetention: yesterday's trail is
// what an incident looked into today needs.
const MinAuditRetention = 24 * time.Hour

// Default returns the settings init writes for a public URL.
func Default(publicURL string) Config {
	c := Config{PublicURL: publicURL}
	c.applyDefaults()
	return c
}

// applyDefaults gives the settings left out of automator.yaml (or zero)
// the values init writes. public_url has none: it names the server
// certificate's host.
func (c *Config) applyDefaults() {
	if c.HTTPListen == "" {
		c.HTTPListen = DefaultHTTPListen
	}
	if c.DB == "" {
		c.DB = FileDB
	}
	if c.DefaultTimeout == 0 {
		c.DefaultTimeout = DefaultTimeout
	}
	if c.PollWindow == 0 {
		c.PollWindow = DefaultPollWindow
	}
	if c.Listen == "" {
		if u, err := url.Parse(c.PublicURL); err == nil && u.Port() != "" {
			c.Listen = net.JoinHostPort("", u.Port())
		}
	}
}

// Validate returns every problem at once, each naming its field.
func (c Config) Validate() error {
	var errs []error
	_, publicErr := PublicHost(c.PublicURL)
	// An empty listen is init's default from a public URL without a usable
	// port: the public URL's error says what to fix.
	if _, _, err := net.SplitHostPort(c.Listen); err != nil && (c.Listen != "" || publicErr == nil) {
		errs = append(errs, fmt.Errorf("listen: %q is not host:port", c.Listen))
	}
	if _, _, err := net.SplitHostPort(c.HTTPListen); err != nil {
		errs = append(errs, fmt.Errorf("http_listen: %q is not host:port", c.HTTPListen))
	}
	for _, h := range c.HTTPAllowedHosts {
		if err := checkAllowedHost(h); err != nil {
			errs = append(errs, fmt.Errorf("http_allowed_hosts: %w", err))
		}
	}
	if c.HTTPMaxConnections < 0 || c.HTTPMaxConnections > MaxHTTPConnections {
		errs = append(errs, fmt.Errorf("http_max_connections: %d is outside [1, %d] (0 or left out: %d)", c.HTTPMaxConnections, MaxHTTPConnections, DefaultHTTPMaxConnections))
	}
	if c.DashboardLivePagesPerKey < 0 || c.DashboardLivePagesPerKey > MaxHTTPConnections {
		errs = append(errs, fmt.Errorf("dashboard_live_pages_per_key: %d is outside [1, %d] (0 or left out: %d)", c.DashboardLivePagesPerKey, MaxHTTPConnections, DefaultDashboardLivePagesPerKey))
	}
	if publicErr != nil {
		errs = append(errs, fmt.Errorf("public_url: %w", publicErr))
	}
	if err := CheckDB(c.DB); err != nil {
		errs = append(errs, err)
	}
	if c.ReplicaID != "" {
		if err := checkReplicaID(c.ReplicaID); err != nil {
			errs = append(errs, fmt.Errorf("replica_id: %w", err))
		}
	}
	if c.DefaultTimeout <= 0 || c.DefaultTimeout > 24*time.Hour {
		errs = append(errs, fmt.Errorf("default_timeout: %v is outside (0, 24h]", c.DefaultTimeout))
	}
	if c.PollWindow < 100*time.Millisecond || c.PollWindow > 5*time.Minute {
		errs = append(errs, fmt.Errorf("poll_window: %v is outside [100ms, 5m]", c.PollWindow))
	}
	if c.WorkRetention != 0 && c.WorkRetention < MinWorkRetention {
		errs = append(errs, fmt.Errorf("work_retention: %v is under %v (the idempotency window); 0 keeps every unit", c.WorkRetention, MinWorkRetention))
	}
	if c.AuditRetention != 0 && c.AuditRetention < MinAuditRetention {
		errs = append(errs, fmt.Errorf("audit_retention: %v is under %v; 0 keeps every event", c.AuditRetention, MinAuditRetention))
	}
	if c.LogFormat != "" && c.LogFormat != "text" && c.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("log_format: %q is not text or json", c.LogFormat))
	}
	errs = append(errs, c.Limits.validate()...)
	if c.InsecurePlaintext {
		if err := RequireLoopback(c.Listen); err != nil {
			errs = append(errs, fmt.Errorf("insecure_plaintext: %w", err))
		}
	}
	return errors.Join(errs...)
}

// MaxReplicaID is the longest replica_id (--replica-id), in bytes, as a
// proxy's instance_id.
const MaxReplicaID = 128

// checkReplicaID refuses a replica id that `automator replicas`, the logs
// and the heartbeat records could not show as it is: too long, not UTF-8,
// or holding a control character (a newline, a terminal's escape) or an
// invisible one.
func checkReplicaID(id string) error {
	if len(id) > MaxReplicaID {
		return fmt.Errorf("%d bytes, more than %d", len(id), MaxReplicaID)
	}
	return printable.Check(id)
}

// CheckDB returns the problem of the db setting (a SQLite file path, or a
// postgres:// URL), naming the setting, or nil: Validate's check of it, for
// the commands that take --db without the rest of the settings.
func CheckDB(db string) error {
	if db == "" {
		return errors.New("db: must be set (a SQLite file path)")
	}
	if strings.ContainsRune(db, 0) {
		// Else found when serve opens its lock file, with the system's
		// "invalid argument" about a path that looks right in a terminal.
		// A URL is not quoted: it may hold a password.
		what := fmt.Sprintf("%q", db)
		if strings.Contains(db, "://") {
			what = "the URL"
		}
		return fmt.Errorf("db: %s holds a NUL byte, which no path or URL can", what)
	}
	if err := checkDBScheme(db); err != nil {
		return fmt.Errorf("db: %w", err)
	}
	return nil
}

// checkDBScheme refuses a db that is a URL of a scheme the automator does
// not serve from (mysql://, or a misspelt postgress://): taken for a
// SQLite file path, it would be refused for a missing directory named
// after its scheme, or, where one existed, make a SQLite database there.
// A path, sqlite:PATH and postgres:// or postgresql:// URLs pass.
func checkDBScheme(db string) error {
	scheme, _, ok := strings.Cut(db, "://")
	if !ok || strings.ContainsAny(scheme, `/\`) {
		return nil // a path (that may hold "://" further on)
	}
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		// One that does not parse would be taken for a SQLite file path,
		// refused as a missing file named after the URL, its password
		// shown. Neither the URL nor the parser's reason (which quotes a
		// part of it) is shown: it may hold a password.
		if _, err := url.Parse(db); err != nil {
			return fmt.Errorf("the %s:// URL does not parse as a URL; in its user name and password, write a character other than a letter, a digit or -._~ percent-encoded (%% as %%25, @ as %%40, / as %%2F, # as %%23, ? as %%3F, a space as %%20)", scheme)
		}
		return nil
	case "sqlite":
		return nil
	}
	return fmt.Errorf("unsupported database URL (scheme %q); give a postgres:// URL, or a SQLite file path", scheme)
}

// RequireLoopback refuses addresses that are not on a loopback interface.
func RequireLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port", addr)
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("plaintext is allowed on a loopback address only, not %q; serve TLS or listen on 127.0.0.1", addr)
	}
	return nil
}

// PublicHost returns the host of an https://HOST:PORT URL.
func PublicHost(publicURL string) (string, error) {
	u, err := hostport.Parse(publicURL)
	if err != nil {
		return "", err
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return "", fmt.Errorf("%q: scheme must be https (or http for loopback plaintext)", u.Redacted())
	}
	if u.Scheme == "http" && RequireLoopback(u.Host) != nil {
		// The automator serves plaintext on loopback only: every profile
		// would name an address that cannot answer, and its proxies would
		// send their token across the network in clear trying.
		return "", fmt.Errorf("%q: http:// is for an automator serving plaintext on loopback only; give https://%s", publicURL, u.Host)
	}
	if ip, err := netip.ParseAddr(u.Hostname()); err == nil && ip.Unmap().IsUnspecified() {
		// What a listener takes for "every address" names none to dial:
		// every profile would send its proxies to their own host.
		return "", fmt.Errorf("%q: %s is no address a proxy can reach (to a listener it means every address); give the automator's host name, or an address of it", publicURL, u.Hostname())
	}
	if strings.Contains(u.Hostname(), "*") {
		// A certificate's wildcard names many hosts, a dialler none: init
		// made a server certificate for it and every profile named a host
		// no proxy resolves (a review).
		return "", fmt.Errorf("%q: a wildcard names no host a proxy can dial; give the automator's own host name", publicURL)
	}
	if h := u.Hostname(); strings.ContainsFunc(h, func(r rune) bool { return r >= utf8.RuneSelf }) {
		// A certificate names hosts in ASCII only (x509 would refuse it
		// with "cannot be encoded as an IA5String").
		hint := "its ASCII (xn--…) form"
		if a, err := idna.Lookup.ToASCII(h); err == nil {
			hint = a
		}
		return "", fmt.Errorf("%q: a host name outside ASCII is written in its ASCII form in a URL and a certificate: give %s", publicURL, hint)
	}
	return u.Hostname(), nil
}

// MaxFileSize bounds automator.yaml: its settings are a few KiB, a long
// http_allowed_hosts included.
const MaxFileSize = 1 << 20

// Load reads DIR/automator.yaml, refusing unknown keys; a setting left out
// takes its default.
func Load(dir string) (Config, error) {
	path := filepath.Join(dir, FileConfig)
	data, err := secretfile.ReadRegularFile(path, MaxFileSize)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			// Not "run init": a misspelt --data-dir would get a second
			// automator, with its own CA and keys (a review).
			return Config{}, fmt.Errorf("reading %s: not found: %s is not an automator's data directory; give the one `automator init` made as --data-dir (a new automator is made with `automator init --data-dir DIR`)", path, dir)
		}
		return Config{}, fmt.Errorf("reading %s: %w", path, err)
	}
	var c Config
	if err := Decode(data, &c); err != nil {
		return Config{}, fmt.Errorf("parsing %s: %w", path, err)
	}
	c.applyDefaults()
	return c, nil
}

// Decode parses YAML strictly: unknown keys, a fraction for a whole number
// and a second document with content are errors; a trailing "---" with
// nothing after it is not.
func Decode(data []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			// The library says only "EOF".
			return errors.New("the file holds no settings (it is empty or comments only)")
		}
		return yamlerr.Word(err)
	}
	// The YAML library cuts a fraction off for a whole-number setting
	// (limits.max_stdin: 1.5 would be 1 byte): refuse it, as a text is.
	if err := yamlerr.WholeNumbers(data, v); err != nil {
		return err
	}
	return yamlerr.Rest(dec)
}

// Save writes DIR/automator.yaml.
func Save(dir string, c Config) error {
	data, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	header := []byte("# automator settings; `automator serve` flags override them.\n")
	// 0600: a PostgreSQL DSN in db may carry a password.
	return os.WriteFile(filepath.Join(dir, FileConfig), append(header, data...), 0o600)
}

// DBPath resolves the SQLite path of c.DB against the data directory.
func (c Config) DBPath(dir string) string {
	p := c.DB
	if len(p) > len("sqlite:") && p[:len("sqlite:")] == "sqlite:" {
		p = p[len("sqlite:"):]
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	return p
}

// Serving is what FileServing holds.
type Serving struct {
	GRPC      string `yaml:"grpc"`
	HTTP      string `yaml:"http"`
	Plaintext bool   `yaml:"plaintext,omitempty"`
	// DB is the database serve opened: a SQLite file's absolute path, or
	// a PostgreSQL URL without its password. A command run without --db
	// compares it with automator.yaml's (it is absent from the file of a
	// serve of an earlier release).
	DB string `yaml:"db,omitempty"`
}

// WriteServing records the bound addresses (atomically: write then rename).
// The file is written under a new name of its own (O_EXCL), never one
// that may be there already: the data directory may be a service user's,
// where a link at a fixed name would have a serve run as root truncate
// the file it names, and replicas of one directory write theirs at once.
func WriteServing(dir string, s Serving) error {
	data, err := yaml.Marshal(s)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+FileServing+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, FileServing))
	}
	if err != nil {
		os.Remove(tmp)
	}
	removeStaleServing(dir)
	return err
}

// staleServingAfter is the age past which a temporary file of WriteServing
// is a leftover of a serve that stopped between writing and renaming it (a
// crash, a power cut): one being written is renamed within milliseconds.
const staleServingAfter = time.Hour

// removeStaleServing removes the temporary files of WriteServing older
// than staleServingAfter. A younger one may be another replica's (one data
// directory, several serve processes), about to be renamed.
func removeStaleServing(dir string) {
	leftovers, _ := filepath.Glob(filepath.Join(dir, "."+FileServing+".*"))
	for _, path := range leftovers {
		// Lstat and Remove leave what a link names alone.
		if fi, err := os.Lstat(path); err == nil && time.Since(fi.ModTime()) > staleServingAfter {
			os.Remove(path)
		}
	}
}

// RemoveServing removes FileServing if it still holds s (another serve of
// the same directory may have written its own since): once serve stops,
// the addresses it recorded may be bound by another program.
func RemoveServing(dir string, s Serving) error {
	cur, ok, err := ReadServing(dir)
	if err != nil || !ok || cur != s {
		return err
	}
	return os.Remove(filepath.Join(dir, FileServing))
}

// ReadServing reads FileServing; ok is false when it does not exist.
func ReadServing(dir string) (s Serving, ok bool, err error) {
	data, err := os.ReadFile(filepath.Join(dir, FileServing))
	if errors.Is(err, os.ErrNotExist) {
		return Serving{}, false, nil
	}
	if err != nil {
		return Serving{}, false, err
	}
	// Not Decode: serve writes this file, never a person, and a later
	// release may record more in it, which this one reads past.
	if err := yaml.Unmarshal(data, &s); err != nil {
		return Serving{}, false, fmt.Errorf("parsing %s: %w", FileServing, yamlerr.Word(err))
	}
	return s, true, nil
}
