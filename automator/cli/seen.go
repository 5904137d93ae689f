package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/automator/store"
)

// writeSeenInstances lists, for the operator of a rotation or a deletion,
// the instances that polled with the account: each runs a config that
// holds its profile, the one just changed. Those not polling now are
// marked, because they are the ones easily forgotten: a warm standby that
// ran once (a failover, a test) and was stopped. A standby never started
// has never polled and cannot be listed, which the note says.
func writeSeenInstances(w io.Writer, list []store.Instance, pollWindow time.Duration, now time.Time) {
	forgetDays := store.InstanceForgetDays
	if len(list) == 0 {
		fmt.Fprintf(w, "  none has polled in the last %d days; a standby never started cannot be listed: run `proxy status` on each host that holds the profile (it asks the automator whether its config is current)\n", forgetDays)
		return
	}
	since := now.Add(-server.InstanceOnlineWithin(pollWindow))
	for _, in := range list {
		state := "polling"
		switch server.StatusOfInstance(in, since) {
		case server.InstanceStopped:
			state = "STOPPED (it said so at its last poll; a standby?): update its config too"
		case server.InstanceRefused:
			state = fmt.Sprintf("REFUSED (it polls holding key ids %v, none usable): update its config", in.RefusedKeyIDs)
			if in.RefusedWrongKey {
				state = fmt.Sprintf("REFUSED (it polls holding key ids %v, a key among them not the account's key of its id: another account's key, or a mistyped one): update its config", in.RefusedKeyIDs)
			}
			if in.RefusedTokenExpired {
				state = "REFUSED (it polls with the account token of before a rotation whose overlap has ended): update its config"
			}
		case server.InstanceOffline:
			state = "NOT POLLING NOW (a stopped standby?): update its config too"
		}
		fmt.Fprintf(w, "  %s (host %s, version %s): last poll %s (%s), %s\n", in.InstanceID, in.Hostname, in.Version, utc(in.LastPollAt), ago(now, in.LastPollAt), state)
	}
	fmt.Fprintf(w, "  (an instance not polled for %d days is forgotten, and a standby never started is not listed: `proxy status` on each host that holds the profile says whether its config is current)\n", forgetDays)
}
