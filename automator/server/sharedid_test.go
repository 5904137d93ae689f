package server_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/durationpb"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestTwoProcessesPollingAsOneInstanceAreReported: two proxies that share
// an instance id (cloned VMs with one host name, or two proxies on one
// host from one config without --instance-id) run side by side without
// harm, but listings show them as one instance, which stays "online"
// while either polls. The automator notices that two runs alternate and
// warns once, naming the instance and what to do; a restart, whose old
// run never polls again, is not reported.
func TestTwoProcessesPollingAsOneInstanceAreReported(t *testing.T) {
	t.Parallel()
	log := &syncLog{}
	e := newEnv(t, envOptions{log: log})
	px := e.proxyClient()
	poll := func(instance, run string) {
		t.Helper()
		if _, err := px.Poll(t.Context(), &automatorv1.PollRequest{InstanceId: instance, Hostname: "cloned-vm", RunId: run, MaxUnits: 1, Wait: durationpb.New(0)}); err != nil {
			t.Fatalf("poll of %s/%s: %v", instance, run, err)
		}
	}
	// A restart: the old run never comes back.
	poll("restarted", "run-1")
	poll("restarted", "run-1")
	poll("restarted", "run-2")
	poll("restarted", "run-2")
	// Two processes: their polls alternate, again and again.
	for range 3 {
		poll("cloned-vm", "run-a")
		poll("cloned-vm", "run-b")
	}
	const what = "two proxy processes poll as one instance"
	if got := log.lines(what, "instance_id=restarted"); len(got) != 0 {
		t.Errorf("a restart was reported as two processes: %q", got)
	}
	got := log.lines(what, "instance_id=cloned-vm")
	if len(got) != 1 {
		t.Fatalf("%d warnings for two processes polling as cloned-vm; want 1:\n%s", len(got), log.lines(""))
	}
	for _, want := range []string{"level=WARN", "instance_id", "--instance-id", "hostname=cloned-vm", "other_peer=127.0.0.1:"} {
		if !strings.Contains(got[0], want) {
			t.Errorf("the warning %q does not say %q", got[0], want)
		}
	}
}
