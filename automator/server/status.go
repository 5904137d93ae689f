package server

import (
	"time"

	"github.com/opsgate/opsgate/automator/store"
)

// InstanceOnlineWithin is how recent an instance's recorded last poll must
// be for it to count as online: two poll windows (a poll lasts up to one,
// jitter aside, and the next follows at once), plus seenEvery (a poll is
// written at most that often, so the record may be that much behind), plus
// a second for the round trip. With the default 30 s window: 66 s.
func InstanceOnlineWithin(pollWindow time.Duration) time.Duration {
	return 2*pollWindow + seenEvery + time.Second
}

// InstanceStatus is what listings say of one instance.
type InstanceStatus string

const (
	// InstanceOnline: it polled within InstanceOnlineWithin and did not
	// say it was stopping.
	InstanceOnline InstanceStatus = "online"
	// InstanceStopped: its last poll said it was stopping (a graceful
	// stop: a service stop, SIGTERM, Ctrl+C), however long ago, and it
	// has not polled since.
	InstanceStopped InstanceStatus = "stopped"
	// InstanceRefused: it polled within InstanceOnlineWithin, and that
	// poll was refused because it holds no usable key of its account (a
	// profile of before a key rotation: store.Instance.RefusedKeyIDs), or
	// because its account token expired (the whole profile of before the
	// rotation, past its overlap: store.Instance.RefusedTokenExpired), or
	// because a key it holds is not the account's key of its id (another
	// account's key line, or a mistyped one: store.Instance.RefusedWrongKey). It
	// is alive and claims nothing until it gets the latest profile.
	InstanceRefused InstanceStatus = "refused"
	// InstanceOffline: it has not polled within InstanceOnlineWithin and
	// did not say it was stopping (killed, crashed, cut off, its host
	// down), whether or not its last poll was refused.
	InstanceOffline InstanceStatus = "offline"
)

// StatusOfInstance classifies in, online (or refused) when its last poll
// is at or after onlineSince (now - InstanceOnlineWithin(poll window)).
func StatusOfInstance(in store.Instance, onlineSince time.Time) InstanceStatus {
	switch {
	case in.Stopped:
		return InstanceStopped
	case in.LastPollAt.Before(onlineSince):
		return InstanceOffline
	case in.Refused():
		return InstanceRefused
	}
	return InstanceOnline
}

// AccountStatus sums up an account for operators (listings, dashboard).
type AccountStatus string

const (
	// StatusOnline: at least one instance is online (InstanceOnline).
	StatusOnline AccountStatus = "online"
	// StatusStranded: units are queued and no instance is online; they
	// time out at their deadlines unless one returns. Some of its
	// instances may be refused (store.AccountStats.InstancesRefused): the
	// listings say so beside it.
	StatusStranded AccountStatus = "stranded"
	// StatusRefused: no instance online, nothing queued, and at least one
	// instance refused (InstanceRefused): its proxies are up but hold no
	// usable key of the account or an expired account token (a profile of
	// before a key rotation), and
	// will claim nothing until they get the latest profile.
	StatusRefused AccountStatus = "refused"
	// StatusOffline: no instance online, nothing queued (a stopped group,
	// or a warm standby not yet started).
	StatusOffline AccountStatus = "offline"
	// StatusNoInstances: no instance polled within
	// store.InstanceForgetAfter (or ever), nothing queued.
	StatusNoInstances AccountStatus = "no instances"
)

// StatusOf classifies a (with InstancesOnline and InstancesRefused counted
// since now - InstanceOnlineWithin(poll window)). Queued units with no
// instance online are stranded whatever the instances are: they time out.
func StatusOf(a store.AccountStats) AccountStatus {
	switch {
	case a.InstancesOnline > 0:
		return StatusOnline
	case a.Queued > 0:
		return StatusStranded
	case a.InstancesRefused > 0:
		return StatusRefused
	case a.Instances > 0:
		return StatusOffline
	}
	return StatusNoInstances
}
