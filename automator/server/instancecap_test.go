package server_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/server"
	"github.com/opsgate/opsgate/internal/loglimit"
	"github.com/opsgate/opsgate/internal/logtest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// pollOnce polls as instance id for a unit, answered at once.
func pollOnce(ctx context.Context, px automatorv1.ProxyServiceClient, id string) error {
	_, err := px.Poll(ctx, &automatorv1.PollRequest{InstanceId: id, MaxUnits: 1, Wait: durationpb.New(0)})
	return err
}

// TestANewInstanceAtTheAccountsBoundTakesAnOfflineOnesPlaceOrIsRefused: the instance id
// is the proxy's to choose, so an account's token could record a new
// instance with every poll (a review: 437,584 rows in two minutes, the
// account's listing past the largest message, and every account's gauges
// missing from /metrics while they were read). Past
// limits.max_instances_per_account, a poll of a new instance id is refused
// with ResourceExhausted saying so, and not recorded; the recorded
// instances poll as before, and a unit is still handed to them. A new
// instance takes the place of the record of one offline.
func TestANewInstanceAtTheAccountsBoundTakesAnOfflineOnesPlaceOrIsRefused(t *testing.T) {
	t.Parallel()
	var log logtest.Buffer
	e := newEnv(t, envOptions{limits: server.Limits{MaxInstancesPerAccount: 2}, log: &log})
	ctx := context.Background()
	px := e.proxyClient()
	poll := func(id string) error { return pollOnce(ctx, px, id) }
	for _, id := range []string{"a", "b"} {
		if err := poll(id); err != nil {
			t.Fatalf("poll of instance %s under the bound: %v", id, err)
		}
	}
	for i := range 30 {
		err := poll(fmt.Sprintf("c%d", i))
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), `instance "c`+fmt.Sprint(i)+`" is not recorded, and its polls are refused: account "`+e.account+`" holds 2 instance records, the most it may (limits.max_instances_per_account`) {
			t.Fatalf("poll of a third instance, bound 2: %v; want ResourceExhausted saying why", err)
		}
	}
	list, err := e.store.InstanceList(ctx, e.account)
	if err != nil || len(list) != 2 {
		t.Errorf("instances recorded: %v, %v; want a and b only", list, err)
	}
	if n := strings.Count(log.String(), "poll of a new instance refused"); n < 1 || n > loglimit.DefaultLines {
		t.Errorf("%d log lines of 30 refused polls in a minute; want 1 to %d:\n%s", n, loglimit.DefaultLines, log.String())
	}
	u := submit(t, e.callerClient(), e.account, 0)
	if c := claimOne(t, px, "b"); c.GetWorkId() != u.GetWorkId() {
		t.Errorf("a recorded instance claimed %s; want %s", c.GetWorkId(), u.GetWorkId())
	}

	// Once a has been offline for longer than "online" allows (its last
	// poll an hour ago), a new instance takes its place: a standby
	// started under a new id is not locked out by the records of gone
	// ones, or of a flood's.
	db, err := sql.Open("sqlite", "file:"+e.dbPath+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE instances SET last_poll_at = last_poll_at - ? WHERE instance_id = 'a'`, time.Hour.Nanoseconds()); err != nil {
		t.Fatal(err)
	}
	if err := poll("standby"); err != nil {
		t.Fatalf("poll of a new instance, bound 2, one record offline: %v; want it recorded in that one's place", err)
	}
	list, err = e.store.InstanceList(ctx, e.account)
	if err != nil || len(list) != 2 || list[0].InstanceID != "b" || list[1].InstanceID != "standby" {
		t.Errorf("instances recorded: %+v, %v; want b and standby", list, err)
	}
	// a, whose record made room, polls again: it is known no more, so its
	// poll is not kept in memory to be written in a batch past the bound
	// (a re-review), but refused, b and standby online.
	if err := poll("a"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("poll of the instance whose record made room, the others online: %v; want ResourceExhausted", err)
	}
	if err := e.srv.FlushInstances(ctx); err != nil {
		t.Fatal(err)
	}
	if list, err = e.store.InstanceList(ctx, e.account); err != nil || len(list) != 2 {
		t.Errorf("instances recorded after the polls kept in memory were written: %+v, %v; want 2", list, err)
	}
}

// TestAnInstanceMadeRoomForByAnotherReplicaIsNotWrittenBackPastTheBound:
// another replica (here, SQL as its eviction makes it) made room at the
// account's bound for a new instance's record by deleting the record of
// an instance this automator keeps in memory; that instance's next poll,
// kept in memory, is not written back by a batch past the bound (which a
// batch does not check: a re-review found the records of a flood's ids
// written back so, past it), but as a new instance's is: at the bound,
// with every record online, it is not recorded, and its next poll is
// refused.
func TestAnInstanceMadeRoomForByAnotherReplicaIsNotWrittenBackPastTheBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{limits: server.Limits{MaxInstancesPerAccount: 2}})
	ctx := context.Background()
	e.srv.BatchPolls()
	px := e.proxyClient()
	poll := func(id string) error { return pollOnce(ctx, px, id) }
	for _, id := range []string{"a", "b"} {
		if err := poll(id); err != nil {
			t.Fatalf("poll of instance %s under the bound: %v", id, err)
		}
	}
	db, err := sql.Open("sqlite", "file:"+e.dbPath+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO instances (account, instance_id, hostname, version, last_poll_at, in_flight, refused_key_ids)
		SELECT account, 'z', 'z', version, last_poll_at, 0, '' FROM instances WHERE instance_id = 'a'`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`DELETE FROM instances WHERE instance_id = 'a'`); err != nil {
		t.Fatal(err)
	}
	if err := poll("a"); err != nil {
		t.Fatalf("poll of instance a, known to the automator: %v", err)
	}
	if err := e.srv.FlushInstances(ctx); err != nil {
		t.Fatal(err)
	}
	list, err := e.store.InstanceList(ctx, e.account)
	if err != nil || len(list) != 2 || list[0].InstanceID != "b" || list[1].InstanceID != "z" {
		t.Errorf("instances recorded after the polls kept in memory were written: %+v, %v; want b and z", list, err)
	}
	if err := poll("a"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("next poll of the instance whose record made room, the others online: %v; want ResourceExhausted", err)
	}
}
