package gctune

import (
	"context"
	"math"
	"os"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// Ratio is the share of its cgroup's memory limit that LimitMemory gives
// the collector as its soft limit: the rest is left to what the collector
// does not manage (the process's own code and threads, and memory a
// collection has freed but not yet handed back).
const Ratio = 0.9

// MemoryLimit is what LimitMemory set: the cgroup's limit and the
// collector's soft limit (GOMEMLIMIT), in bytes.
type MemoryLimit struct{ Cgroup, Soft int64 }

// LimitMemory gives the garbage collector a soft memory limit (GOMEMLIMIT)
// of Ratio of the memory limit of the process's cgroup (a container's
// limit, a systemd unit's MemoryMax=), and reads that limit again every
// minute until ctx is done, for a container resized in place. The kernel
// kills a process that goes past its cgroup's limit; without the soft
// limit the collector, which lets the heap grow to twice what it kept live
// (or more: Start), knows nothing of it, and the process is killed for
// garbage it could have collected. With it, the collector works harder as
// the limit comes near.
//
// GOMEMLIMIT in the environment wins, and AUTOMEMLIMIT sets another share
// (a number up to 1) or, "off", none. It returns false where it set
// nothing: the process's cgroup has no memory limit, or it is not on
// Linux, or the environment said so.
func LimitMemory(ctx context.Context) (MemoryLimit, bool) {
	if os.Getenv("GOMEMLIMIT") != "" || os.Getenv("AUTOMEMLIMIT") == "off" {
		return MemoryLimit{}, false
	}
	cgroup, err := memlimit.FromCgroup()
	if err != nil || cgroup == 0 || cgroup > math.MaxInt64 {
		return MemoryLimit{}, false
	}
	soft, err := memlimit.Set(memlimit.WithRatio(Ratio), memlimit.WithProvider(memlimit.FromCgroup),
		memlimit.WithRefreshInterval(ctx, time.Minute))
	if err != nil || soft <= 0 || soft == math.MaxInt64 {
		return MemoryLimit{}, false
	}
	return MemoryLimit{Cgroup: int64(cgroup), Soft: soft}, true
}
