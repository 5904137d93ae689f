package cli

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"
)

// pprofEnv is a hidden setting for `make bench PROFILE=1` only: when it
// holds a loopback host:port, serve also serves net/http/pprof there and
// samples blocking and mutex contention. It is not part of the interface
// (DESIGN.md), which is why it is an environment variable read here rather
// than a flag.
const pprofEnv = "AUTOMATOR_PPROF_ADDR"

// startPprof serves profiles on $AUTOMATOR_PPROF_ADDR until ctx is done. It
// does nothing when the variable is unset, and refuses any address that is
// not loopback.
func startPprof(ctx context.Context, log *slog.Logger) {
	addr := os.Getenv(pprofEnv)
	if addr == "" {
		return
	}
	host, _, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err != nil || (!strings.EqualFold(host, "localhost") && (ip == nil || !ip.IsLoopback())) {
		log.Warn(pprofEnv+" must be a loopback host:port; not serving profiles", "addr", addr)
		return
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		log.Warn("not serving profiles", "addr", addr, "err", err)
		return
	}
	mux := http.NewServeMux()
	var c contention
	mux.Handle("/debug/pprof/block", c.sampling(pprof.Handler("block")))
	mux.Handle("/debug/pprof/mutex", c.sampling(pprof.Handler("mutex")))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	context.AfterFunc(ctx, func() { srv.Close() })
	log.Info("serving pprof for benchmarks", "addr", lis.Addr().String())
}

// contention samples blocking and mutex contention only while a block or
// mutex profile is being taken (the bench asks for them with ?seconds=N,
// beside the CPU profile). Sampling all the time (one event per millisecond
// blocked, one contention in 100) cost about 4 % of the automator's CPU at
// 64 callers, in the counted runs of `make bench PROFILE=1` too.
type contention struct {
	mu sync.Mutex
	n  int // requests in progress
}

func (c *contention) sampling(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		if c.n == 0 {
			runtime.SetBlockProfileRate(int(time.Millisecond))
			runtime.SetMutexProfileFraction(100)
		}
		c.n++
		c.mu.Unlock()
		defer func() {
			c.mu.Lock()
			c.n--
			if c.n == 0 {
				runtime.SetBlockProfileRate(0)
				runtime.SetMutexProfileFraction(0)
			}
			c.mu.Unlock()
		}()
		h.ServeHTTP(w, r)
	})
}
