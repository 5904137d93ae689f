// Package service installs, controls and runs the proxy (and the automator)
// as an operating-system service, through github.com/kardianos/service.
//
// What it adds to kardianos:
//
//   - The service definitions are rendered here, not by kardianos's
//     templates: a systemd unit (SystemdUnit) with Restart=always, ordering
//     after network-online.target, KillMode=mixed (so SIGTERM reaches only the
//     proxy, which lets running scripts finish) and hardening that leaves
//     scripts working; and a SysV init script (SysVScript) for hosts without
//     systemd, which supervises the service (restarts it after a crash),
//     waits for a graceful stop and keeps a pid file and a log file. Both are
//     plain text handed to kardianos as its custom template, so what a test
//     renders is exactly what Install writes.
//   - Install, Uninstall, Start, Stop and Query work by service name, and
//     Uninstall removes everything Install made (kardianos leaves the SysV
//     rc.d links behind).
//   - Run runs a function as the service: Start does not block, a stop
//     request (SIGTERM on Linux, the Service Control Manager on Windows)
//     cancels the function's context, and Stop waits for it with a bound. The
//     function's log lines go to the platform's log (journald or syslog, the
//     Windows Event Log) through LogWriter.
//
// On Linux systemd is used when it runs, SysV init otherwise. On Windows the
// service starts automatically (or manually) and is restarted on failure.
package service
