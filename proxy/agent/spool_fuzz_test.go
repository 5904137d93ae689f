package agent

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// FuzzSpoolRecords: what a proxy reads back from its spool at start. A
// result it wrote (any work id, account and instance the automator may
// send) is read back as written until keepPastDeadline after its deadline
// (this host's clock may have stepped forward: the automator's decides),
// and dropped after, whatever else the directory holds; a record file with arbitrary
// content (a disk error, an older or newer proxy, a hand edit) is posted
// only if it is a whole record of this instance, and else is dropped as
// expired, left to its instance, or set aside as .bad, never fatal. The
// same holds for the lost-polls file.
func FuzzSpoolRecords(f *testing.F) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	valid, _ := json.Marshal(spooled{Version: spoolVersion, WorkID: "w_1", Account: "acme", InstanceID: "host-a",
		Deadline: now.Add(time.Minute), Complete: mustMarshal(&automatorv1.CompleteRequest{WorkId: "w_1", InstanceId: "host-a"})})
	lost, _ := json.Marshal([]lostPolls{{Version: 1, InstanceID: "host-a", Run: "r1", From: 3, Seq: 9, StoppedAt: now}})
	for _, seed := range []struct {
		workID, account, instance string
		ttl                       int64
		raw                       []byte
	}{
		{"w_0123456789abcdef0123456789abcdef", "acme", "host-a", 60, valid},
		{"w_1", "acme", "host-a", 60, valid},
		{"w_3", "acme", "host-a", -50 * 3600, valid}, // dropped: far past its deadline
		{"W_AB", "a b", "host-b", -1, lost},
		{"con", "", "", 300, []byte(`{"version":1,"work_id":"x","deadline":"2026-03-01T12:01:00Z","complete":"CgF5"}`)},
		{"x-77", "acme", "host-a", 0, []byte(`{"version":2}`)},
		{"../../etc/passwd", "acme", "host-a", 86400, []byte(`null`)},
		{"w_2", "acme", "host-a", 10, []byte(`[{"instance_id":"host-a","stopped_at":"0001-01-01T00:00:00Z"}]`)},
	} {
		f.Add(seed.workID, seed.account, seed.instance, seed.ttl, []byte("output"), seed.raw)
	}
	log := slog.New(slog.DiscardHandler)
	f.Fuzz(func(t *testing.T, workID, account, instance string, ttl int64, sealed, raw []byte) {
		if workID == "" || !utf8.ValidString(workID) || !utf8.ValidString(account) || !utf8.ValidString(instance) {
			return // the automator's claims carry a work id; protobuf and JSON strings are UTF-8
		}
		dir := filepath.Join(t.TempDir(), SpoolDirName)
		s := newSpool(dir, log)
		deadline := now.Add(time.Duration(ttl%(96*3600)) * time.Second)
		req := &automatorv1.CompleteRequest{WorkId: workID, ClaimId: "c", InstanceId: instance,
			Outcome: automatorv1.Outcome_OUTCOME_SUCCEEDED, SealedResult: sealed}
		mine := s.path(workID)
		if err := s.write(mine, account, deadline, req, func() error { return nil }); err != nil {
			t.Fatalf("writing the record of %q: %v", workID, err)
		}
		other := filepath.Join(dir, "other.json")
		if other == mine {
			other = filepath.Join(dir, "other2.json")
		}
		for _, p := range []string{other, filepath.Join(dir, LostPollsName)} {
			if err := os.WriteFile(p, raw, 0o600); err != nil {
				t.Fatal(err)
			}
		}

		due := s.load(instance, now)
		found := false
		for _, p := range due {
			if p.req.GetInstanceId() != instance && p.path != other {
				t.Fatalf("a record of instance %q loaded for %q", p.req.GetInstanceId(), instance)
			}
			if p.path == mine {
				found = true
				if !proto.Equal(p.req, req) || p.account != account || !p.deadline.Equal(deadline) {
					t.Fatalf("record read back as %v, %q, %v; written as %v, %q, %v", p.req, p.account, p.deadline, req, account, deadline)
				}
			}
			if !now.Before(p.deadline.Add(keepPastDeadline)) {
				t.Fatalf("a record %v past its deadline %v loaded at %v", keepPastDeadline, p.deadline, now)
			}
		}
		if now.Before(deadline.Add(keepPastDeadline)) != found {
			t.Fatalf("record of deadline %v loaded at %v: %v", deadline, now, found)
		}
		if _, err := os.Stat(mine); (err == nil) != found {
			t.Fatalf("record of %q (loaded: %v) on disk: %v", workID, found, err)
		}
		otherLoaded := slices.ContainsFunc(due, func(p pending) bool { return p.path == other })
		if _, err := os.Stat(other); !otherLoaded && err == nil {
			var rec spooled
			if json.Unmarshal(raw, &rec) != nil || rec.InstanceID == instance {
				t.Fatalf("record %q neither loaded, dropped, set aside nor another instance's", raw)
			}
		}

		mineLost, othersLost := s.loadLost(instance)
		for _, l := range mineLost {
			if l.InstanceID != instance {
				t.Fatalf("lost polls of %q read for %q", l.InstanceID, instance)
			}
		}
		for _, l := range slices.Concat(mineLost, othersLost) {
			if time.Since(l.StoppedAt) > keepLostFor {
				t.Fatalf("lost polls of %v kept", l.StoppedAt)
			}
		}
	})
}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}
