//go:build linux

package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/opsgate/opsgate/automator/automatortest"
	"github.com/opsgate/opsgate/automator/store"
)

// TestServeForgetsInstancesThatStoppedPollingFor30Days: the record of an
// instance whose latest poll is older than store.InstanceForgetAfter leaves the
// listing once serve runs, so names that come and go (a container's host
// name at each start, names a token's holder makes up) do not add records
// for ever; one that polled within it stays.
func TestServeForgetsInstancesThatStoppedPollingFor30Days(t *testing.T) {
	t.Parallel()
	dir := initDir(t)
	var out, errb bytes.Buffer
	if code := Main(t.Context(), []string{"account", "create", "acme", "--data-dir", dir}, Env{Stdout: &out, Stderr: &errb}); code != 0 {
		t.Fatalf("account create: %s", errb.String())
	}
	st, _ := openDirStore(t, dir)
	now := time.Now()
	for id, polled := range map[string]time.Time{
		"gone-long-ago": now.Add(-store.InstanceForgetAfter - time.Hour),
		"gone-lately":   now.Add(-store.InstanceForgetAfter + time.Hour),
	} {
		if err := st.InstanceSeen(t.Context(), store.InstanceSeenParams{Account: "acme", InstanceID: id, Hostname: id, Version: "v0.9", Now: polled}); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()

	s := serveDirInProcess(t, dir)
	automatortest.WaitFor(t, 15*time.Second, "serve to delete the record of gone-long-ago", func() bool {
		return strings.Contains(s.log.String(), "deleted the records of instances")
	})
	out.Reset()
	errb.Reset()
	if code := Main(t.Context(), []string{"instances", "--account", "acme", "--data-dir", dir}, Env{Stdout: &out, Stderr: &errb}); code != 0 {
		t.Fatalf("instances: %s", errb.String())
	}
	if strings.Contains(out.String(), "gone-long-ago") {
		t.Errorf("an instance that last polled more than %v ago is still listed:\n%s", store.InstanceForgetAfter, out.String())
	}
	if !strings.Contains(out.String(), "gone-lately") {
		t.Errorf("an instance that polled less than %v ago is no longer listed:\n%s", store.InstanceForgetAfter, out.String())
	}
}
