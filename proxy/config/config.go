// Package config reads a proxy's configuration file: the profile printed by
// `automator account create` (automator_url, token, key, ca_cert) plus local
// settings (scripts_dir, instance_id, max_concurrency, ...). Flags of
// `proxy run` override the local settings, so two instances can share a file.
package config

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/opsgate/opsgate/internal/hostport"
	"github.com/opsgate/opsgate/internal/printable"
	"github.com/opsgate/opsgate/internal/scriptenv"

	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/secretfile"
	"github.com/opsgate/opsgate/internal/yamlerr"
)

// Defaults of the local settings.
const (
	DefaultMaxConcurrency = 4
	DefaultMaxOutput      = 1 << 20
	DefaultGracePeriod    = 30 * time.Second
)

// Config is the proxy's configuration file.
type Config struct {
	// AutomatorURL is https://HOST:PORT of the automator (http:// only for a
	// loopback automator serving plaintext in tests and demos: refused to
	// any other host).
	AutomatorURL string `yaml:"automator_url"`
	// Token authenticates this proxy for its account.
	Token string `yaml:"token"`
	// Key opens commands and seals results ("ID:SECRET").
	Key string `yaml:"key"`
	// CACert is the PEM certificate of the automator's CA; only it is trusted.
	CACert string `yaml:"ca_cert"`
	// PreviousKeys are older keys of the account ("ID:SECRET") still in use
	// after a rotate-key, printed in the new profile: units sealed with
	// them open too. Optional.
	PreviousKeys []string `yaml:"previous_keys,omitempty"`
	// PinSHA256 pins the automator's key: SHA-256 digests (64 hex digits)
	// of a SubjectPublicKeyInfo. With ca_cert, the verified chain must also
	// hold one of them (pin the CA's key: it survives certificate
	// renewals); without ca_cert, the automator's own certificate key must
	// be one of them. Optional.
	PinSHA256 []string `yaml:"pin_sha256,omitempty"`

	// ScriptsDir is the only directory scripts are run from. Relative in a
	// file, it is relative to the directory of the file's path as given
	// (Load makes it absolute), not to wherever the proxy was started.
	ScriptsDir string `yaml:"scripts_dir"`
	// scriptsDirWritten is scripts_dir as the file wrote it, before Load
	// made it absolute.
	scriptsDirWritten string
	// InstanceID names this process among the account's instances; the host
	// name by default.
	InstanceID string `yaml:"instance_id"`
	// MaxConcurrency is how many units run at once (4).
	MaxConcurrency int `yaml:"max_concurrency"`
	// MaxOutputBytes caps each of stdout and stderr of a script (1 MiB).
	MaxOutputBytes int `yaml:"max_output_bytes"`
	// GracePeriod is how long a stopping proxy lets running scripts finish
	// before it kills them (30s when the file does not set it; 0s kills
	// them at once).
	GracePeriod time.Duration `yaml:"grace_period"`
	// gracePeriodSet: the file sets grace_period (to 0s, perhaps).
	gracePeriodSet bool
	// maxConcurrencySet, maxOutputSet: the file sets max_concurrency,
	// max_output_bytes (to 0, perhaps, which Validate refuses).
	maxConcurrencySet, maxOutputSet bool
	// StateDir is where the proxy keeps its state file (status.json: when
	// it last polled the automator successfully), read by `proxy status`.
	// An absolute path, made if missing; `proxy install` sets it to
	// /var/lib/<name> (Linux) or %ProgramData%\<name>\state (Windows).
	// Unset: no state file. One state_dir serves one running proxy, which
	// holds it with a lock (agent.LockStateDir); a second is refused.
	StateDir string `yaml:"state_dir"`
	// AllowedEnv lists the only environment variables a command may set
	// for this proxy's scripts (NAME, or NAME_* for every name beginning
	// NAME_, or "*" for any); a unit setting another fails and nothing
	// runs. It narrows the automator's and the proxy's own refusals
	// (scriptenv.Refused), never widens them. Unset: none.
	AllowedEnv []string `yaml:"allowed_env,omitempty"`
	// LogFormat is how `proxy run` logs: "text" (the default) or "json",
	// one object per line, for a log collector.
	LogFormat string `yaml:"log_format,omitempty"`
}

// MaxFileSize bounds a config file: a profile and its local settings are
// a few KiB, previous keys and pins included.
const MaxFileSize = 1 << 20

// Load reads and strictly parses a configuration file (unknown keys are
// errors naming the key and line). It does not apply defaults or validate.
func Load(path string) (Config, error) {
	c, _, err := LoadDigest(path)
	return c, err
}

// LoadDigest is Load, also returning the Digest of the bytes it read: a
// running proxy records it, so that `proxy status` can tell when the file
// changed after the proxy read it.
func LoadDigest(path string) (Config, string, error) {
	data, err := secretfile.ReadRegularFile(path, MaxFileSize)
	if err != nil {
		return Config{}, "", fmt.Errorf("reading proxy config: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return Config{}, "", fmt.Errorf("parsing proxy config %s: %w", path, err)
	}
	c.scriptsDirWritten = c.ScriptsDir
	if c.ScriptsDir != "" && !filepath.IsAbs(c.ScriptsDir) {
		dir := c.ScriptsDir
		if fromFile(dir) {
			dir = filepath.Join(filepath.Dir(path), dir)
		}
		abs, err := filepath.Abs(dir)
		if err != nil {
			return Config{}, "", fmt.Errorf("proxy config %s: scripts_dir: %w", path, err)
		}
		c.ScriptsDir = abs
	}
	return c, Digest(data), nil
}

// fromFile reports whether the relative path p is relative to a
// directory (the config file's), as "scripts" or "..\scripts" is; on
// Windows, "\scripts" (the current drive's root) and "C:scripts" (drive
// C's current directory) are relative too, but to no directory a file
// lies in, and are taken as filepath.Abs takes them.
func fromFile(p string) bool {
	return filepath.VolumeName(p) == "" && !os.IsPathSeparator(p[0])
}

// ScriptsDirWritten is scripts_dir as the file wrote it: relative,
// perhaps, where ScriptsDir is the absolute path Load made of it.
func (c Config) ScriptsDirWritten() string { return c.scriptsDirWritten }

// Digest is the hex SHA-256 of a config file's bytes as they are on disk.
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// Parse decodes a configuration strictly: unknown keys and a second
// document with content are errors; a trailing "---" is not. The file may
// be UTF-8 or UTF-16 with a byte-order mark (secretfile.Decode), as Windows
// PowerShell 5's > writes a profile; UTF-16 without one is refused, saying
// so.
func Parse(data []byte) (Config, error) {
	text, err := secretfile.Decode(data)
	if err != nil {
		return Config{}, fmt.Errorf("the file is %w", err)
	}
	data = []byte(text)
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return Config{}, errors.New("the file is empty")
		}
		return Config{}, yamlerr.Word(err)
	}
	var set struct {
		GracePeriod    *time.Duration `yaml:"grace_period"`
		MaxConcurrency yaml.Node      `yaml:"max_concurrency"`
		MaxOutputBytes yaml.Node      `yaml:"max_output_bytes"`
	}
	if err := yaml.Unmarshal(data, &set); err == nil {
		c.gracePeriodSet = set.GracePeriod != nil
		c.maxConcurrencySet = set.MaxConcurrency.Kind != 0 && set.MaxConcurrency.Tag != "!!null"
		c.maxOutputSet = set.MaxOutputBytes.Kind != 0 && set.MaxOutputBytes.Tag != "!!null"
	}
	// The YAML library cuts a fraction off for a whole-number setting
	// (4.5 runs 4 units): refuse it, as a text is.
	if err := yamlerr.WholeNumbers(data, &c); err != nil {
		return Config{}, err
	}
	// Settings in a second document (after a "---") would be ignored.
	if err := yamlerr.Rest(dec); err != nil {
		return Config{}, err
	}
	return c, nil
}

// ApplyDefaults fills unset local settings.
func (c *Config) ApplyDefaults() {
	if c.InstanceID == "" {
		if h, err := os.Hostname(); err == nil {
			c.InstanceID = h
		}
	}
	if c.MaxConcurrency == 0 && !c.maxConcurrencySet {
		c.MaxConcurrency = DefaultMaxConcurrency
	}
	if c.MaxOutputBytes == 0 && !c.maxOutputSet {
		c.MaxOutputBytes = DefaultMaxOutput
	}
	if c.GracePeriod == 0 && !c.gracePeriodSet {
		c.GracePeriod = DefaultGracePeriod
	}
}

// Validate returns every problem at once, each naming its key.
func (c Config) Validate() error {
	var errs []error
	if _, _, err := c.Target(); err != nil {
		errs = append(errs, fmt.Errorf("automator_url: %w", err))
	}
	if c.Token == "" {
		errs = append(errs, errors.New("token: required (from `automator account create`)"))
	} else if strings.ContainsFunc(c.Token, func(r rune) bool { return r <= ' ' || r > '~' }) {
		// gRPC sends no header holding such a character: the proxy would
		// start only to fail every poll.
		errs = append(errs, errors.New("token: holds a space, a line break or a character that is not printable ASCII; copy it as `automator account create` printed it"))
	}
	if _, err := crypto.ParseKey(c.Key); err != nil {
		errs = append(errs, fmt.Errorf("key: %w", err))
	}
	errs = append(errs, c.validateKeyRing()...)
	_, pinErrs := c.pins()
	errs = append(errs, pinErrs...)
	if u, err := url.Parse(c.AutomatorURL); err == nil && u.Scheme == "https" && (c.CACert != "" || len(c.PinSHA256) == 0) {
		if err := checkPEM(c.CACert); err != nil {
			errs = append(errs, fmt.Errorf("ca_cert: %w", err))
		}
	}
	if c.ScriptsDir == "" {
		errs = append(errs, errors.New("scripts_dir: required (in the config file, or as proxy run's --scripts-dir)"))
	} else if err := noNUL(c.ScriptsDir); err != nil {
		errs = append(errs, fmt.Errorf("scripts_dir: %w", err))
	} else if fi, err := os.Stat(c.ScriptsDir); err != nil {
		errs = append(errs, fmt.Errorf("scripts_dir: %w", err))
	} else if !fi.IsDir() {
		errs = append(errs, fmt.Errorf("scripts_dir: %s is not a directory", c.ScriptsDir))
	} else if err := mayEnter(c.ScriptsDir); err != nil {
		// It exists, but every unit would fail ("permission denied")
		// while the proxy polled, and took its share of the work.
		errs = append(errs, fmt.Errorf("scripts_dir: %s: %w: this proxy's user may not enter it, so no script in it could run", c.ScriptsDir, err))
	}
	if err := checkInstanceID(c.InstanceID); err != nil {
		errs = append(errs, fmt.Errorf("instance_id: %w", err))
	}
	if c.MaxConcurrency < 1 || c.MaxConcurrency > 256 {
		errs = append(errs, fmt.Errorf("max_concurrency: %d is outside [1, 256]", c.MaxConcurrency))
	}
	if c.MaxOutputBytes < 1024 || c.MaxOutputBytes > 2<<20 {
		errs = append(errs, fmt.Errorf("max_output_bytes: %d is outside [1024, %d]", c.MaxOutputBytes, 2<<20))
	}
	if c.GracePeriod < 0 || c.GracePeriod > time.Hour {
		errs = append(errs, fmt.Errorf("grace_period: %v is outside [0, 1h]", c.GracePeriod))
	}
	if c.LogFormat != "" && c.LogFormat != "text" && c.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("log_format: %q is not text or json", c.LogFormat))
	}
	if err := scriptenv.Allowlist(c.AllowedEnv).Check(); err != nil {
		errs = append(errs, fmt.Errorf("allowed_env: %w", err))
	}
	if err := noNUL(c.StateDir); err != nil {
		errs = append(errs, fmt.Errorf("state_dir: %w", err))
	} else if c.StateDir != "" && !filepath.IsAbs(c.StateDir) {
		errs = append(errs, fmt.Errorf("state_dir: %q must be an absolute path", c.StateDir))
	}
	return errors.Join(errs...)
}

// noNUL refuses a path holding a NUL byte, which no path can: the
// system's own error for it ("stat /opt/scripts: invalid argument", the NUL
// unseen in a terminal) would name a path that looks right.
func noNUL(path string) error {
	if strings.ContainsRune(path, 0) {
		return fmt.Errorf("%q holds a NUL byte, which no path can", path)
	}
	return nil
}

// MaxInstanceID is the longest instance_id the automator accepts, in bytes.
const MaxInstanceID = 128

// checkInstanceID refuses what the automator refuses in every poll (an id
// it would answer INVALID_ARGUMENT: too long, or holding a character that
// is not printable; or that cannot even be sent), so that
// such a proxy does not start only to retry for ever.
func checkInstanceID(id string) error {
	if id == "" || len(id) > MaxInstanceID {
		return fmt.Errorf("must be 1 to %d bytes (defaults to the host name)", MaxInstanceID)
	}
	return printable.Check(id)
}

// Target returns the host:port to dial and whether TLS is used.
func (c Config) Target() (addr string, useTLS bool, err error) {
	u, err := hostport.Parse(c.AutomatorURL)
	if err != nil {
		return "", false, err
	}
	switch u.Scheme {
	case "https":
		return u.Host, true, nil
	case "http":
		if c.PlaintextToRemote() {
			// The automator serves plaintext on loopback only: anything
			// else is a relay, and the token would cross a network in
			// clear (`automator exec --server` refuses it too).
			return "", false, fmt.Errorf("%q: http:// is for an automator serving plaintext on loopback only; give https://%s", u.Redacted(), u.Host)
		}
		return u.Host, false, nil
	}
	return "", false, fmt.Errorf("%q must be https://HOST:PORT", u.Redacted())
}

func checkPEM(s string) error {
	if s == "" {
		return errors.New("required (the automator's CA certificate, PEM)")
	}
	// Every block is trusted (a CA and its successor, during a move), so
	// each must be a certificate: the TLS setup skips one that is not
	// without a word.
	rest := []byte(s)
	for n := 1; ; n++ {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			if n == 1 {
				return errors.New("not a PEM certificate")
			}
			return nil
		}
		if block.Type != "CERTIFICATE" {
			return fmt.Errorf("PEM block %d is a %q, not a certificate", n, block.Type)
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return fmt.Errorf("PEM block %d is not a valid certificate: %w", n, err)
		}
	}
}
