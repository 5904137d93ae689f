//go:build unix

package acceptwait

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/opsgate/opsgate/internal/logtest"
	"github.com/opsgate/opsgate/internal/waittest"
)

// fakeListener hands out what the test queues: a connection or an error
// for each Accept. Its errors are shaped as the net package's.
type fakeListener struct {
	next   chan error // nil: a connection
	closed chan struct{}
	once   sync.Once
}

func newFake() *fakeListener {
	return &fakeListener{next: make(chan error, 64), closed: make(chan struct{})}
}

func (f *fakeListener) Accept() (net.Conn, error) {
	select {
	case err := <-f.next:
		if err != nil {
			return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", err)}
		}
		a, b := net.Pipe()
		b.Close()
		return a, nil
	case <-f.closed:
		return nil, net.ErrClosed
	}
}

func (f *fakeListener) Close() error   { f.once.Do(func() { close(f.closed) }); return nil }
func (f *fakeListener) Addr() net.Addr { return &net.TCPAddr{} }

// wrapped is a fake listener and its wrapping with a Headroom of its own,
// with quiet for Quiet, and the log and the count of waits.
func wrapped(t *testing.T, quiet time.Duration) (*fakeListener, net.Listener, *logtest.Buffer, *atomic.Int64) {
	t.Helper()
	f := newFake()
	var log logtest.Buffer
	var waits atomic.Int64
	saved := Quiet
	Quiet = quiet
	l := Wrap(f, NewHeadroom(nil), Options{Name: "gRPC", Who: "the automator", Log: slog.New(slog.NewTextHandler(&log, nil)),
		Waited: func(time.Duration) { waits.Add(1) }})
	Quiet = saved
	t.Cleanup(func() { l.Close() })
	return f, l, &log, &waits
}

// fastRetries makes the tries again and the counts of descriptors come
// every few milliseconds for the test.
func fastRetries(t *testing.T) {
	savedFirst, savedMax := First, MaxDelay
	First, MaxDelay = time.Millisecond, 5*time.Millisecond
	t.Cleanup(func() { First, MaxDelay = savedFirst, savedMax })
}

func accept(t *testing.T, l net.Listener) {
	t.Helper()
	c, err := l.Accept()
	if err != nil {
		t.Fatalf("Accept: %v", err)
	}
	c.Close()
}

const (
	outOfFiles = "the automator has as many files open as its limit allows ("
	again      = "accepting connections again"
)

// TestAnAcceptOutOfFileDescriptorsIsTriedAgainAndTheShortageLoggedOnce: the
// accepts that fail with EMFILE are tried again within Accept, which
// returns the connection that comes once there is room; each failure is
// counted, and the shortage is logged once, however often a descriptor
// comes free and a connection takes it in between.
func TestAnAcceptOutOfFileDescriptorsIsTriedAgainAndTheShortageLoggedOnce(t *testing.T) {
	fastRetries(t)
	f, l, log, waits := wrapped(t, time.Hour)
	for range 5 {
		f.next <- syscall.EMFILE
	}
	f.next <- nil
	accept(t, l)
	if n := waits.Load(); n < 5 {
		t.Errorf("%d waits counted, want one for each of the 5 failed accepts at least", n)
	}
	for range 3 {
		f.next <- syscall.EMFILE
		f.next <- nil
		accept(t, l)
	}
	if n := waits.Load(); n < 8 {
		t.Errorf("%d waits counted, want one for each of the 8 failed accepts at least", n)
	}
	got := log.String()
	if n := strings.Count(got, outOfFiles); n != 1 || !strings.Contains(got, "level=ERROR") ||
		!strings.Contains(got, "new connections to the gRPC listener wait until some close; the connections it has are served") ||
		!strings.Contains(got, "too many open files") {
		t.Errorf("log:\n%s\nwant one ERROR saying the automator is out of file descriptors, what that does, and the error", got)
	}
	if strings.Contains(got, again) {
		t.Errorf("log:\n%s\nwant the shortage not over: accepts failed within the hour", got)
	}
}

// TestAShortageIsOverOnceNoAcceptFailedForAWhile: once the listener has
// not waited for Quiet, the shortage is said to be over, once, and the
// next failure is a new shortage, logged again.
func TestAShortageIsOverOnceNoAcceptFailedForAWhile(t *testing.T) {
	fastRetries(t)
	f, l, log, _ := wrapped(t, 20*time.Millisecond)
	f.next <- syscall.EMFILE
	f.next <- syscall.EMFILE
	f.next <- nil
	accept(t, l)
	waittest.Until(t, "the shortage to be said over", func() bool { return strings.Contains(log.String(), again) })
	if got := log.String(); !strings.Contains(got, "level=INFO") || !strings.Contains(got, "short_for=") || !strings.Contains(got, "waited=") {
		t.Errorf("log:\n%s\nwant an INFO line saying how long the shortage lasted and how long the listener waited", got)
	}
	f.next <- syscall.EMFILE
	f.next <- nil
	accept(t, l)
	waittest.Until(t, "the second shortage to be said over", func() bool { return strings.Count(log.String(), again) == 2 })
	if got := log.String(); strings.Count(got, outOfFiles) != 2 {
		t.Errorf("log:\n%s\nwant each of the two shortages logged once", got)
	}
}

// TestCloseEndsAnAcceptsPause: a listener closed while Accept waits to try
// again returns at once with the listener's error, and says nothing of a
// shortage being over.
func TestCloseEndsAnAcceptsPause(t *testing.T) {
	savedFirst, savedMax := First, MaxDelay
	First, MaxDelay = time.Hour, time.Hour
	t.Cleanup(func() { First, MaxDelay = savedFirst, savedMax })
	f, l, log, _ := wrapped(t, time.Millisecond)
	f.next <- syscall.ENFILE
	done := make(chan error, 1)
	go func() {
		_, err := l.Accept()
		done <- err
	}()
	waittest.Until(t, "the accept to fail", func() bool { return strings.Contains(log.String(), "sysctl fs.file-max") })
	l.Close()
	if err := waittest.Recv(t, done, "Accept to return once closed"); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept returned %v, want the closed listener's error", err)
	}
	if got := log.String(); !strings.Contains(got, "the host has as many files open as it allows (sysctl fs.file-max)") || strings.Contains(got, again) {
		t.Errorf("log:\n%s\nwant the host's shortage, and nothing said of its end", got)
	}
}

// TestOtherAcceptErrorsAreTheServers: an error that is no shortage is
// returned as it is, neither tried again, counted nor logged.
func TestOtherAcceptErrorsAreTheServers(t *testing.T) {
	f, l, log, waits := wrapped(t, time.Hour)
	f.next <- syscall.ECONNRESET
	if _, err := l.Accept(); !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("Accept returned %v, want ECONNRESET", err)
	}
	if waits.Load() != 0 || log.String() != "" {
		t.Errorf("%d waits counted, log %q; want none", waits.Load(), log.String())
	}
}

// TestShortagesNameWhatRanOut: the process's own limit with its value, the
// host's, memory.
func TestShortagesNameWhatRanOut(t *testing.T) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		t.Fatal(err)
	}
	if r.Cur > 1<<30 {
		t.Skipf("no limit of open files worth the name here (%d)", r.Cur)
	}
	for err, want := range map[error]string{
		syscall.EMFILE:     "the automator has as many files open as its limit allows (" + strconv.FormatUint(uint64(r.Cur), 10) + ": ulimit -n; LimitNOFILE= of its systemd unit)",
		syscall.ENFILE:     "the host has as many files open as it allows (sysctl fs.file-max)",
		syscall.ENOBUFS:    "the host is out of memory for connections",
		syscall.ENOMEM:     "the host is out of memory for connections",
		syscall.ECONNRESET: "",
		net.ErrClosed:      "",
	} {
		if got, _ := shortage(&net.OpError{Op: "accept", Err: os.NewSyscallError("accept4", err)}, "the automator"); got != want {
			t.Errorf("shortage(%v) = %q, want %q", err, got, want)
		}
	}
}

// countedAs makes the count of the process's descriptors count for the
// test.
func countedAs(t *testing.T, count func() (int, error)) {
	saved := countFiles
	countFiles = count
	t.Cleanup(func() { countFiles = saved })
}

// TestWithoutACountOfItsFilesAProcessKeepsNoReserveAndSaysSoOnce: where
// /proc cannot be read (a chroot, a sandbox), the listeners accept as they
// would without a reserve, and the log says why once; they do not wait for
// ever, as if the process were out of descriptors.
func TestWithoutACountOfItsFilesAProcessKeepsNoReserveAndSaysSoOnce(t *testing.T) {
	if _, ok := fileLimit(); !ok || !countable {
		t.Skip("no limit of open files, or no count of them, here")
	}
	countedAs(t, func() (int, error) {
		return 0, &os.PathError{Op: "open", Path: "/proc/self/fd", Err: syscall.ENOENT}
	})
	var log logtest.Buffer
	h := NewHeadroom(slog.New(slog.NewTextHandler(&log, nil)))
	if h.Counting() {
		t.Error("the headroom counts the process's files without /proc")
	}
	if ok, _, _, _ := h.room(); !ok {
		t.Error("no room to accept without a count of the process's files")
	}
	if got := log.String(); strings.Count(got, "level=WARN") != 1 || !strings.Contains(got, "cannot count the open files of the process") ||
		!strings.Contains(got, "/proc/self/fd") {
		t.Errorf("log:\n%s\nwant one WARN saying the files cannot be counted, and why", got)
	}
}

// TestACountThatFindsNoDescriptorLeftIsAFullProcess: a count that fails
// for want of a descriptor to count with means the process holds all it
// may: the listener waits, and accepts once a count finds room.
func TestACountThatFindsNoDescriptorLeftIsAFullProcess(t *testing.T) {
	limit, ok := fileLimit()
	if !ok || !countable {
		t.Skip("no limit of open files, or no count of them, here")
	}
	fastRetries(t)
	var full atomic.Bool
	full.Store(true)
	countedAs(t, func() (int, error) {
		if full.Load() {
			return 0, &os.PathError{Op: "open", Path: "/proc/self/fd", Err: syscall.EMFILE}
		}
		return 10, nil
	})
	f := newFake()
	var log logtest.Buffer
	h := NewHeadroom(slog.New(slog.NewTextHandler(&log, nil)))
	l := Wrap(f, h, Options{Name: "gRPC", Who: "the automator", Log: slog.New(slog.NewTextHandler(&log, nil))})
	done, exited := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(exited)
		c, err := l.Accept()
		if err == nil {
			c.Close()
		}
		done <- err
	}()
	// Gone before the test's cleanups set First and MaxDelay back.
	defer func() { l.Close(); <-exited }()
	f.next <- nil
	want := "the automator has " + strconv.Itoa(limit) + " files open and its limit allows " + strconv.Itoa(limit)
	waittest.Until(t, "the listener to wait for descriptors", func() bool { return strings.Contains(log.String(), want) })
	full.Store(false)
	if err := waittest.Recv(t, done, "the connection to be accepted once a count found room"); err != nil {
		t.Errorf("Accept: %v", err)
	}
	if !h.Counting() || strings.Contains(log.String(), "level=WARN") {
		t.Errorf("a count short of descriptors turned the count off:\n%s", log.String())
	}
}
