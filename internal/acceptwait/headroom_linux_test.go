package acceptwait

import (
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/opsgate/opsgate/internal/logtest"
	"github.com/opsgate/opsgate/internal/waittest"
)

// TestListenersKeepTheReserveForTheProcesssOwnFiles: with the process a
// few connections short of its limit of open files, a listener accepts
// until it holds all but the reserve, and the process can still open that
// many files of its own; the connections past it wait, and are accepted
// once some close. One line says so, none says an accept failed.
func TestListenersKeepTheReserveForTheProcesssOwnFiles(t *testing.T) {
	fastRetries(t)
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The clients connect first, and wait in the listen queue: each takes
	// a descriptor here, and each connection accepted will take another.
	const clients = 24
	for range clients {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatalf("dialing: %v", err)
		}
		defer c.Close()
	}
	open, err := openFiles()
	if err != nil {
		t.Fatal(err)
	}
	// Room for 7 connections.
	limit := open + 7 + Reserve(open+7+8)
	reserve := Reserve(limit)
	if limit-reserve != open+7 {
		t.Fatalf("limit %d, reserve %d: want room for 7 connections over %d files", limit, reserve, open)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: uint64(limit), Max: old.Max}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
			t.Fatal(err)
		}
	}()
	var log logtest.Buffer
	l := Wrap(ln, NewHeadroom(nil), Options{Name: "gRPC", Who: "the automator", Log: slog.New(slog.NewTextHandler(&log, nil))})
	accepted := make(chan net.Conn, clients)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	// The listener is closed, and its goroutine gone, before the test's
	// cleanups set First and MaxDelay back.
	defer func() { l.Close(); <-done }()
	const waiting = "of which it keeps the last "
	waittest.Until(t, "the listener to wait for descriptors", func() bool { return strings.Contains(log.String(), waiting) })
	var held []net.Conn
	for len(accepted) > 0 {
		held = append(held, <-accepted)
	}
	if len(held) != 7 {
		t.Errorf("%d connections accepted with room for 7 (a limit of %d open files, %d held before)", len(held), limit, open)
	}
	var files []*os.File
	for i := range reserve - 1 {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Errorf("opening file %d of the reserve of %d with %d connections accepted: %v", i+1, reserve, len(held), err)
			break
		}
		files = append(files, f)
	}
	for _, f := range files {
		f.Close()
	}
	for _, c := range held {
		c.Close()
	}
	for n := len(held); n < clients; n++ {
		c := waittest.Recv(t, accepted, "the waiting connections to be accepted once some closed ("+strconv.Itoa(n)+" of "+strconv.Itoa(clients)+")")
		c.Close()
	}
	got := log.String()
	if strings.Count(got, "level=ERROR") != 1 || strings.Contains(got, "as many files open as its limit allows") {
		t.Errorf("log:\n%s\nwant one line saying the listener waits, none of a failed accept", got)
	}
}
