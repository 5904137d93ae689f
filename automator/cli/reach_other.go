//go:build !linux

package cli

import (
	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/proxy/service"
)

// checkServiceUserReach: --user is Linux only.
func checkServiceUserReach(*service.User, string, string, config.Config) error { return nil }
