package agent

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// builtin runs a command whose name starts with "@" inside the proxy,
// without starting a process. Such names cannot collide with scripts: the
// runner refuses no name starting with "@", but built-ins are matched first.
func (a *Agent) builtin(cmd *automatorv1.Command) (*automatorv1.Result, error) {
	now := time.Now()
	switch cmd.GetScript() {
	case "@ping":
		// It reads none of them: a caller who gave some expected them
		// to do something, and hears that nothing would.
		if len(cmd.GetArgs()) > 0 || len(cmd.GetStdin()) > 0 || len(cmd.GetEnv()) > 0 {
			return nil, errors.New("@ping takes no arguments, stdin or environment variables")
		}
		out := fmt.Sprintf("instance_id=%s\nhostname=%s\nversion=%s\nuptime=%s\n",
			a.o.InstanceID, a.o.Hostname, a.o.Version, now.Sub(a.started).Round(time.Second))
		return &automatorv1.Result{
			Stdout:     []byte(out),
			StartedAt:  timestamppb.New(now),
			FinishedAt: timestamppb.New(time.Now()),
		}, nil
	}
	return nil, fmt.Errorf("unknown built-in command %q (built-ins: @ping; names beginning with @ are the proxy's own, never a script's)", cmd.GetScript())
}
