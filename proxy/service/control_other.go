//go:build !linux && !windows

package service

import (
	"errors"

	"github.com/kardianos/service"
)

var errUnsupported = errors.New("service management is supported on Linux (systemd or SysV init) and Windows")

func chooseSystem() {}

func checkPlatformSpec(Spec) error { return errUnsupported }

func definition(service.Service, string) (string, bool, error) { return "", false, errUnsupported }

func definitionText(string, string) (string, error) { return "", errUnsupported }

func running(service.Service, string) (bool, string, error) { return false, "", errUnsupported }

func bootStart(string) bool { return false }

func start(service.Service, string) error { return errUnsupported }

func stop(service.Service, string) error { return errUnsupported }

func afterInstall(service.Service, Spec) error { return errUnsupported }

func afterUninstall(string) error { return nil }

// KeptLog is the log of service name that Uninstall kept: none here, the
// service manager keeps the log.
func KeptLog(string) string { return "" }

// DefinitionFiles are the files of service name that Uninstall removes:
// none here, the service manager keeps the definition.
func DefinitionFiles(string) []string { return nil }

// IsServiceProcess: no service manager here.
func IsServiceProcess(string, int) (bool, error) { return false, errUnsupported }

// installedHere lists none here: a service not installed is named alone.
func installedHere() map[string]string { return nil }

// isAdmin: no service manager here; nothing to add to its errors.
func isAdmin() bool { return true }
