package server_test

import (
	"context"
	"slices"
	"testing"
	"time"

	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// listedInstances is what `automator instance list` shows of the account:
// the ids of its instances as stored.
func (e *env) listedInstances() []string {
	e.t.Helper()
	list, err := e.store.InstanceList(context.Background(), e.account)
	if err != nil {
		e.t.Fatal(err)
	}
	var ids []string
	for _, in := range list {
		ids = append(ids, in.InstanceID)
	}
	return ids
}

// TestAnAccountCreatedAgainListsNoneOfTheDeletedAccountsInstances: the
// polls of a deleted account's instances that the automator still keeps
// in memory (RecordInstances) are never written under an account created
// again under its name before the automator heard of the deletion (its
// watch looks once an hour here, as another replica may not have looked
// yet): the new account lists only the instances of its own proxies, and
// the first poll of one of them is written at once, as a new instance's
// is, though its id is one of the old account's.
func TestAnAccountCreatedAgainListsNoneOfTheDeletedAccountsInstances(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{wrap: cachedCredentials, sweepInterval: time.Hour})
	e.srv.BatchPolls()
	old := e.proxyClient()
	for _, id := range []string{"host-a", "host-b", "host-a", "host-b"} {
		if _, err := pollNow(old, id, 0); err != nil {
			t.Fatalf("poll of the old account's %s: %v", id, err)
		}
	}
	if got := e.listedInstances(); !slices.Equal(got, []string{"host-a", "host-b"}) {
		t.Fatalf("the old account lists %v; want host-a, host-b (their first polls written at once)", got)
	}

	e.deleteAccount(e.account)
	token, _ := e.addAccount(e.account)
	fresh := automatorv1.NewProxyServiceClient(e.conn(token))
	if _, err := pollNow(fresh, "host-a", 0); err != nil {
		t.Fatalf("poll of the new account's host-a: %v", err)
	}
	if got := e.listedInstances(); !slices.Equal(got, []string{"host-a"}) {
		t.Errorf("after the new account's first poll, it lists %v; want host-a, written at once", got)
	}
	if err := e.srv.FlushInstances(context.Background()); err != nil {
		t.Fatalf("FlushInstances: %v", err)
	}
	if got := e.listedInstances(); !slices.Equal(got, []string{"host-a"}) {
		t.Errorf("after the polls kept in memory were written, the new account lists %v; want host-a only", got)
	}
}
