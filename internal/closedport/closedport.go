// Package closedport gives tests an address on which every TCP connection is
// refused, for as long as the test runs; and, on Linux, one on which every
// connection goes unanswered (Blackholed).
//
// A port taken with net.Listen on :0 and closed is free only a moment ago:
// another process on the machine may listen on it before the test dials
// it, and the dial the test expects refused is accepted. A socket bound
// but never listening holds the port (nobody else may bind it) and the
// kernel refuses every connection to it.
//
// Only tests import it (test/deps checks that).
package closedport

import (
	"net"
	"strconv"
	"testing"
)

// Addr returns "127.0.0.1:PORT", where nothing listens and no other
// process can listen until the test (and its cleanups) ends: a connection
// to it is refused.
func Addr(t testing.TB) string {
	t.Helper()
	port, release, err := hold()
	if err != nil {
		t.Fatalf("holding a loopback port that refuses connections: %v", err)
	}
	t.Cleanup(release)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
