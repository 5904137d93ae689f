package scriptenv

import (
	"strconv"
	"strings"
	"testing"
)

// TestRefusesVariablesThatMakeAnInterpreterRunOtherCode: each of these
// makes a shell, an interpreter or the loader run code that is not the
// deployed script's (see names); a lower-case twin is refused too.
func TestRefusesVariablesThatMakeAnInterpreterRunOtherCode(t *testing.T) {
	for _, k := range []string{
		"BASH_ENV", "SHELLOPTS", "BASHOPTS", "PS4", "BASH_FUNC_echo%%", "ZDOTDIR",
		"LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH", "DYLD_INSERT_LIBRARIES", "GCONV_PATH", "GLIBC_TUNABLES",
		"PERL5OPT", "PERL5LIB", "PERLLIB", "PERL5DB",
		"PYTHONSTARTUP", "PYTHONPATH", "PYTHONHOME", "PYTHONWARNINGS", "PYTHONUSERBASE",
		"NODE_OPTIONS", "NODE_PATH", "RUBYOPT", "RUBYLIB", "RUBYGEMS_GEMDEPS",
		"LUA_INIT", "LUA_INIT_5_4", "PHPRC", "PHP_INI_SCAN_DIR",
		"JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "COMSPEC", "PSModulePath",
		"COR_ENABLE_PROFILING", "COR_PROFILER", "COR_PROFILER_PATH", "COR_PROFILER_PATH_64",
		"CORECLR_ENABLE_PROFILING", "CORECLR_PROFILER_PATH", "DOTNET_ENABLE_PROFILING", "DOTNET_PROFILER_PATH",
		"DOTNET_STARTUP_HOOKS", "cor_profiler_path",
		"ld_preload", "rubygems_gemdeps",
	} {
		err := Refused(k)
		if err == nil {
			t.Errorf("Refused(%q) = nil, want it refused", k)
			continue
		}
		if !strings.Contains(err.Error(), strconv.Quote(k)) {
			t.Errorf("Refused(%q) = %q, which does not name the variable", k, err)
		}
	}
}

// TestAcceptsCommonNames: names a command commonly sets, some of them
// read by an interpreter without making it run other code, pass.
func TestAcceptsCommonNames(t *testing.T) {
	for _, k := range []string{
		"ENV", "PROMPT_COMMAND", "PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "IFS",
		"PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING", "NODE_ENV", "RUBY_ENV", "RAILS_ENV",
		"DEPLOY_TARGET", "LUA", "PHP_VERSION", "PROXY_WORK_ID",
		"DOTNET_ENVIRONMENT", "DOTNET_CLI_TELEMETRY_OPTOUT", "CORS_ORIGIN",
	} {
		if err := Refused(k); err != nil {
			t.Errorf("Refused(%q) = %v, want it accepted", k, err)
		}
	}
}
