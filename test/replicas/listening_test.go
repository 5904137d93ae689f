//go:build linux

package replicas

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/store/pgstore/pgtest"
	"github.com/opsgate/opsgate/internal/proctest"
)

// TestAReplicaSaysOnMetricsThatItHearsTheOthers: a replica on PostgreSQL
// serves automator_replica_listening on /metrics, 1 once it listens for
// the other replicas' queue events, so an alert can tell a replica that
// stopped hearing them.
func TestAReplicaSaysOnMetricsThatItHearsTheOthers(t *testing.T) {
	t.Parallel()
	c := newCluster(t, pgtest.DSN(t), 1)
	c.Start(t)
	r := c.Replicas[0]
	s, err := proctest.WaitServing(r.proc, r.DataDir, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var last string
	if !poll(20*time.Second, func() bool {
		resp, err := http.Get("http://" + s.HTTP + "/metrics")
		if err != nil {
			last = err.Error()
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		last = string(b)
		return strings.Contains(last, "\nautomator_replica_listening 1\n")
	}) {
		t.Fatalf("/metrics never said automator_replica_listening 1; last answer:\n%s", grepLines(last, "automator_replica_listening"))
	}
}

// grepLines returns the lines of text that contain s.
func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
