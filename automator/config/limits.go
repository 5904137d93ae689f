package config

import (
	"fmt"
	"time"
)

// MaxMessage bounds one gRPC message each way (8 MiB): a command with its
// stdin, or a result with both output streams at their caps, fits with
// room to spare. Larger messages are refused with ResourceExhausted.
const MaxMessage = 8 << 20

// MaxStdinLimit is the highest limits.max_stdin may be set to (4 MiB): with
// the args and env bounds, a command stays under MaxMessage.
const MaxStdinLimit = 4 << 20

// Limits is the `limits:` section of automator.yaml: what a caller may
// submit and what abuse may cost. A field left out (zero) takes its
// default, noted beside it; the bounds keep a command within MaxMessage.
type Limits struct {
	// MaxScriptName bounds command.script, in bytes (255).
	MaxScriptName int `yaml:"max_script_name,omitempty"`
	// MaxArgs bounds the number of command.args (1024).
	MaxArgs int `yaml:"max_args,omitempty"`
	// MaxArgsBytes bounds all of command.args together (262144: 256 KiB).
	MaxArgsBytes int `yaml:"max_args_bytes,omitempty"`
	// MaxEnv bounds the number of command.env variables (256).
	MaxEnv int `yaml:"max_env,omitempty"`
	// MaxEnvBytes bounds command.env's names and values together (65536).
	MaxEnvBytes int `yaml:"max_env_bytes,omitempty"`
	// MaxStdin bounds command.stdin, in bytes (1048576: 1 MiB).
	MaxStdin int `yaml:"max_stdin,omitempty"`
	// MaxQueuedPerAccount bounds the units queued (not yet claimed) on one
	// account (10000); more get ResourceExhausted.
	MaxQueuedPerAccount int `yaml:"max_queued_per_account,omitempty"`
	// MaxInstancesPerAccount bounds the instance records of one account
	// (20000); at it, a poll of a new instance id takes the place of the
	// record of one offline, and gets ResourceExhausted when all are
	// online.
	MaxInstancesPerAccount int `yaml:"max_instances_per_account,omitempty"`
	// FailedAuthBurst is how many failed authentications one source
	// address may make (30) before further failures get ResourceExhausted;
	// it regains one every FailedAuthRefill (2s). Successful calls never
	// count, so a healthy proxy is never locked out.
	FailedAuthBurst  int           `yaml:"failed_auth_burst,omitempty"`
	FailedAuthRefill time.Duration `yaml:"failed_auth_refill,omitempty"`
}

// validate returns a problem per field out of its bounds, naming it.
func (l Limits) validate() []error {
	var errs []error
	check := func(name string, v, hi int) {
		if v < 0 || v > hi {
			errs = append(errs, fmt.Errorf("limits.%s: %d is outside [1, %d] (0 or left out: the default)", name, v, hi))
		}
	}
	check("max_script_name", l.MaxScriptName, 255) // a file name
	check("max_args", l.MaxArgs, 1<<16)
	check("max_args_bytes", l.MaxArgsBytes, 1<<20)
	check("max_env", l.MaxEnv, 4096)
	check("max_env_bytes", l.MaxEnvBytes, 1<<20)
	// With the args and env bounds, a command stays under MaxMessage.
	check("max_stdin", l.MaxStdin, MaxStdinLimit)
	check("max_queued_per_account", l.MaxQueuedPerAccount, 10_000_000)
	check("max_instances_per_account", l.MaxInstancesPerAccount, 1_000_000)
	check("failed_auth_burst", l.FailedAuthBurst, 1_000_000)
	if l.FailedAuthRefill < 0 || l.FailedAuthRefill > time.Hour {
		errs = append(errs, fmt.Errorf("limits.failed_auth_refill: %v is outside (0, 1h] (0 or left out: the default)", l.FailedAuthRefill))
	}
	return errs
}
