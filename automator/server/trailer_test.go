package server_test

import (
	"context"
	"encoding/base64"
	"slices"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/crypto"
	"github.com/opsgate/opsgate/internal/grpcwire"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestTheProfileTrailerChecksEachOfTheAccountsKeys: the trailer of a proxy
// call names the account's current key and gives the key check of each of
// its keys, each under its own id, so that `proxy status` tells a profile
// holding another key of one of those ids (and only such a one): after a
// rotate-key with an overlap, both the previous key's check and the new
// one's.
func TestTheProfileTrailerChecksEachOfTheAccountsKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	now := time.Now()
	second := e.rotateKey(e.account, 2, now, now.Add(time.Hour))
	var trailer metadata.MD
	// A Complete naming no unit, as `proxy status` checks a profile.
	_, err := e.proxyClient().Complete(context.Background(), &automatorv1.CompleteRequest{}, grpc.Trailer(&trailer))
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Complete naming no unit: %v, want INVALID_ARGUMENT", err)
	}
	if got := trailer.Get(grpcwire.TrailerKeyID); !slices.Equal(got, []string{"2"}) {
		t.Errorf("trailer %s = %q, want the current key, 2", grpcwire.TrailerKeyID, got)
	}
	var want []string
	for _, k := range []crypto.Key{e.key, second} {
		want = append(want, strconv.FormatUint(uint64(k.ID), 10)+":"+base64.RawStdEncoding.EncodeToString(crypto.KeyCheck(k)))
	}
	got := slices.Clone(trailer.Get(grpcwire.TrailerKeyCheck))
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("trailer %s = %q, want the check of each key under its id: %q", grpcwire.TrailerKeyCheck, got, want)
	}
}
