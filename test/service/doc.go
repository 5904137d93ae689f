// Package service tests the proxy and the automator as real OS services on
// this Linux host: `proxy install`, start, stop, status and uninstall
// through the service manager (SysV init here, systemd where it runs), the
// files they leave (none), and a warm standby taking over.
//
// Installing a service needs root; run as another user, the tests that need
// it are skipped and say so. Every service gets a unique name
// (opsgate-test-XXXXXX), and every test uninstalls what it installed, even
// when it fails, so a real installation on the host is never touched.
//
// The deploy files are checked here too: the systemd units by
// `systemd-analyze verify` and against the proxy's flags, and
// deploy/compose/compose.yaml, which Docker cannot run on the build
// machine, run as local processes.
//
// The binaries are built once per run by TestMain (or are the ones `make
// test` built once for every package, OPSGATE_TEST_BIN, linked in), under
// /var/lib when run as root: a systemd service with PrivateTmp could not see
// /tmp.
package service
