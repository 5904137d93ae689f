//go:build linux

package chaos

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/opsgate/opsgate/internal/proctest"
)

// TestAReservedPortRefusesConnectionsAndIsFreedForTheServer: while the
// harness holds a stopped PostgreSQL's port (reservePort), a client that
// dials it is refused, as by a stopped server, not left hanging; once
// released, a server listens on it again.
func TestAReservedPortRefusesConnectionsAndIsFreedForTheServer(t *testing.T) {
	// Below the range of outgoing connections' ports: no connection made
	// on the machine meanwhile takes it before reservePort binds it.
	port := strconv.Itoa(proctest.FreePort(t))

	release := reservePort(port)
	c, err := net.Dial("tcp", "127.0.0.1:"+port)
	if err == nil {
		c.Close()
		t.Fatal("a dial to the reserved port was accepted")
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("a dial to the reserved port: %v; want connection refused", err)
	}
	release()
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatalf("listening on the released port: %v", err)
	}
	ln.Close()
}

// TestPGStartTriesAgainOnlyWhenItsPortIsTaken: the harness starts a
// stopped PostgreSQL again only when its start failed because its port was
// taken, once the port is free; any other failure is reported at once,
// after one start.
func TestPGStartTriesAgainOnlyWhenItsPortIsTaken(t *testing.T) {
	t.Parallel()
	pg := startPG(t)
	if err := pg.stop(); err != nil {
		t.Fatal(err)
	}
	pg.reserved()
	pg.reserved = nil
	held, err := net.Listen("tcp", "127.0.0.1:"+pg.port)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	var taken error
	pg.onAddrInUse = func(err error) { taken = err; held.Close() }
	pg.starts = 0
	if err := pg.start(); err != nil {
		t.Fatalf("start on a port freed after its first start failed: %v", err)
	}
	if taken == nil || pg.starts != 2 {
		t.Errorf("start on a port held at first: %d starts, first failure %v; want 2, the first for the port", pg.starts, taken)
	}

	// Another failure: a setting PostgreSQL does not know.
	pg.onAddrInUse = nil
	if err := pg.stop(); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(pg.dir, "data", "postgresql.conf")
	f, err := os.OpenFile(conf, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString("\nno_such_setting_of_the_test = 1\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	pg.starts = 0
	err = pg.start()
	if err == nil {
		t.Fatal("start with a setting PostgreSQL does not know succeeded")
	}
	if pg.starts != 1 {
		t.Errorf("start with a setting PostgreSQL does not know ran pg_ctl start %d times, want 1 (%v)", pg.starts, err)
	}
}
