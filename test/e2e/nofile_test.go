//go:build linux

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/internal/acceptwait"
	"github.com/opsgate/opsgate/internal/proctest"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// TestAnAutomatorOutOfFileDescriptorsSaysSoOnceServesWhatItHoldsAndAcceptsOnceSomeClose:
// an automator whose connections come to the file descriptors its limit
// allows stops accepting short of it, keeping a reserve for its own files
// (/metrics still reads the process's), and logs it once for each
// listener (the HTTP server logged a line per retried accept, gRPC nothing
// at all); it goes on serving the connections it holds (a unit queued on
// one runs on a proxy connected before, reads at once are answered), and
// accepts the connections that waited meanwhile, gRPC and HTTP, once some
// close, saying so once.
func TestAnAutomatorOutOfFileDescriptorsSaysSoOnceServesWhatItHoldsAndAcceptsOnceSomeClose(t *testing.T) {
	t.Parallel()
	a := startAutomator(t)
	cfg := a.createAccount(t, "acme")
	scripts := t.TempDir()
	writeScript(t, scripts, "hello.sh", `echo "hello $1"`)
	p := startProxy(t, cfg, scripts, "a")
	p.WaitPolling(t)
	caller := a.Client(t)
	hello := func(ctx context.Context, c automatorv1.AutomatorServiceClient, who string) error {
		st, err := c.ExecuteOnProxy(ctx, &automatorv1.ExecuteRequest{Account: "acme",
			Command: &automatorv1.Command{Script: "hello.sh", Args: []string{who}}, Timeout: durationpb.New(time.Minute)})
		switch {
		case err != nil:
			return err
		case st.GetState() != automatorv1.State_STATE_SUCCEEDED || string(st.GetResult().GetStdout()) != "hello "+who+"\n":
			return fmt.Errorf("unit ended %v (%s), stdout %q; want succeeded, %q", st.GetState(), st.GetReason(), st.GetResult().GetStdout(), "hello "+who+"\n")
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := hello(ctx, caller, "before"); err != nil {
		t.Fatalf("a call before the limit: %v", err)
	}
	// /metrics is read on one connection, opened now and kept.
	scrape := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Hour}}
	t.Cleanup(scrape.CloseIdleConnections)
	metric := func(sample string) (float64, bool) {
		resp, err := scrape.Get("http://" + a.HTTPAddr + "/metrics")
		if err != nil {
			t.Fatalf("reading /metrics on the connection kept open: %v", err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		for l := range strings.SplitSeq(string(body), "\n") {
			if v, ok := strings.CutPrefix(l, sample+" "); ok {
				n, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatal(err)
				}
				return n, true
			}
		}
		return 0, false
	}
	waited := func(listener string) float64 {
		sample := `automator_accept_waited_seconds_total{listener="` + listener + `"}`
		n, ok := metric(sample)
		if !ok {
			t.Fatalf("/metrics has no %s", sample)
		}
		return n
	}
	if n := waited("grpc"); n != 0 {
		t.Fatalf("the gRPC listener waited %gs before the limit", n)
	}

	// The limit: what the automator holds now, room for 8 connections and
	// the reserve. 16 connections that finish their TLS handshake and
	// HTTP/2 preface (so that the automator keeps them, idle) take the 8,
	// and the others wait.
	pid := a.proc.Pid()
	// serve holds its database open from the start for its writer and
	// each of its four readers, so that no read needs a descriptor later.
	if n := openedFile(t, pid, filepath.Join(a.DataDir, "automator.db")); n != 5 {
		t.Errorf("the automator has its database open %d times, want 5: its writer and its four readers", n)
	}
	open := uint64(proctest.OpenFiles(t, pid))
	limit := open + 8 + uint64(acceptwait.Reserve(int(open)+16))
	if r := uint64(acceptwait.Reserve(int(limit))); limit-r != open+8 {
		t.Fatalf("limit %d, reserve %d: want room for 8 connections over %d files", limit, r, open)
	}
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: limit, Max: limit}, nil); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(a.DataDir, config.FileCACert))
	if err != nil {
		t.Fatal(err)
	}
	var hogs []*grpc.ClientConn
	for range 16 {
		c := proctest.Dial(t, a.GRPCAddr, caPEM, "")
		c.Connect()
		hogs = append(hogs, c)
	}
	waitFor(t, time.Minute, "the gRPC listener to wait for file descriptors", func() bool { return waited("grpc") > 0 })
	const outOfFiles = "), of which it keeps the last "
	waitFor(t, 10*time.Second, "the automator to log that it is out of file descriptors", func() bool { return strings.Contains(a.Log(), outOfFiles) })

	// The HTTP listener, waiting in accept since before the limit, takes
	// one connection past it: this one. Then it waits too.
	get := func() error {
		resp, err := (&http.Client{Transport: &http.Transport{}}).Get("http://" + a.HTTPAddr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("HTTP %d", resp.StatusCode)
			}
		}
		return err
	}
	if err := get(); err != nil {
		t.Fatalf("GET /healthz: %v", err)
	}
	// Connections that come now wait: a caller's and an HTTP client's.
	lateCaller := a.Client(t)
	late := make(chan error, 1)
	go func() { late <- hello(ctx, lateCaller, "late") }()
	healthz := make(chan error, 1)
	go func() { healthz <- get() }()
	waitFor(t, time.Minute, "the HTTP listener to wait for file descriptors", func() bool { return waited("http") > 0 })
	// What it holds is served meanwhile, and it has files for itself: the
	// process collector of /metrics opens three to read its figures.
	for _, sample := range []string{"process_open_fds", "process_max_fds"} {
		if n, ok := metric(sample); !ok || n != float64(limit) && sample == "process_max_fds" {
			t.Errorf("/metrics says %s %g (%v); want it read, and the limit %d", sample, n, ok, limit)
		}
	}
	if err := hello(ctx, caller, "meanwhile"); err != nil {
		t.Errorf("a call on a connection opened before the limit was reached, while the automator is at it: %v", err)
	}
	{
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := caller.ListInstances(ctx, &automatorv1.ListInstancesRequest{Account: "acme"})
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("one of 64 reads at once on a connection opened before the limit was reached: %v", err)
			}
		}
	}
	// The waits are not logged each.
	from := waited("grpc")
	waitFor(t, time.Minute, "the gRPC listener to wait a second more", func() bool { return waited("grpc") >= from+1 })
	for what, ch := range map[string]chan error{"the call on a connection made at the limit": late, "GET /healthz on a connection made at the limit": healthz} {
		select {
		case err := <-ch:
			t.Errorf("%s ended (%v) while the automator was at its limit; want it to wait", what, err)
			ch <- err // for the checks below
		default:
		}
	}
	log := a.Log()
	if n := strings.Count(log, outOfFiles); n != 2 {
		t.Errorf("the automator logged %d lines saying it is out of file descriptors, want 2 (one for each listener):\n%s", n, log)
	}
	if strings.Contains(log, "Accept error") {
		t.Errorf("the HTTP server logged its accept errors itself:\n%s", log)
	}

	// They close: the connections that waited are accepted and served.
	for _, c := range hogs {
		c.Close()
	}
	if err := <-late; err != nil {
		t.Errorf("a call on a connection made while the automator was at its limit: %v", err)
	}
	if err := <-healthz; err != nil {
		t.Errorf("GET /healthz on a connection made while the automator was at its limit: %v", err)
	}
	const again = "accepting connections again"
	waitFor(t, 30*time.Second, "the automator to log that it accepts again", func() bool { return strings.Count(a.Log(), again) == 2 })
	if log := a.Log(); strings.Count(log, outOfFiles) != 2 {
		t.Errorf("the automator logged more lines saying it is out of file descriptors:\n%s", log)
	}
}

// openedFile is how many of the process's file descriptors are path.
func openedFile(t *testing.T, pid int, path string) int {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	fds, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && target == path {
			n++
		}
	}
	return n
}
