package cli

import (
	"context"
	"log/slog"
	"os"
	"os/user"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
)

// serverLimits turns automator.yaml's limits into the server's (zero
// fields take the server's defaults).
func serverLimits(l config.Limits) server.Limits {
	return server.Limits{
		MaxScriptName:          l.MaxScriptName,
		MaxArgs:                l.MaxArgs,
		MaxArgsBytes:           l.MaxArgsBytes,
		MaxEnv:                 l.MaxEnv,
		MaxEnvBytes:            l.MaxEnvBytes,
		MaxStdin:               l.MaxStdin,
		MaxQueuedPerAccount:    l.MaxQueuedPerAccount,
		MaxInstancesPerAccount: l.MaxInstancesPerAccount,
		FailedAuthBurst:        l.FailedAuthBurst,
		FailedAuthRefill:       l.FailedAuthRefill,
	}
}

// logCertificateReloads logs each renewed server certificate put in
// service, and each changed one that did not load.
func logCertificateReloads(r *pki.CertReloader, log *slog.Logger) {
	if r == nil {
		return
	}
	r.OnReload = func(err error) {
		if err != nil {
			log.Warn("renewed server certificate not loaded", "err", err)
			return
		}
		log.Info("renewed server certificate loaded; new connections get it")
	}
}

// cliActor names who runs a command on the automator's host, for the
// audit log: the operating system user.
func cliActor() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return "cli:" + u.Username
	}
	return "cli"
}

// cliSource is where a CLI command ran: this host.
func cliSource() string {
	h, _ := os.Hostname()
	return h
}

// cliEvent is event e of a CLI command, with its actor and source: the
// Audit of the params of the change it records, which the store appends
// in the change's own transaction. A change whose event cannot be
// appended is not made.
func cliEvent(e store.AuditEvent) *store.AuditEvent {
	e.Actor, e.Source = cliActor(), cliSource()
	return &e
}

// audit appends an event of a CLI command that records no change of the
// database (a backup taken, a certificate renewed, the summary of a
// restore's units ended) to the audit log. What it records is done
// already, so a failure is reported, not undone.
func audit(ctx context.Context, st store.Store, e store.AuditEvent, env Env) {
	if _, err := st.AuditAppend(ctx, *cliEvent(e)); err != nil {
		env.Stderr.Write([]byte("automator: warning: writing the audit log: " + err.Error() + "\n"))
	}
}
