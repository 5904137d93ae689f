package cli

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
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
	if ip := net.ParseIP(host); err != nil || (host != "localhost" && (ip == nil || !ip.IsLoopback())) {
		log.Warn(pprofEnv+" must be a loopback host:port; not serving profiles", "addr", addr)
		return
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		log.Warn("not serving profiles", "addr", addr, "err", err)
		return
	}
	// Sample one blocking event per millisecond blocked, and one mutex
	// contention event in 100: cheap enough not to change the figures.
	runtime.SetBlockProfileRate(int(time.Millisecond))
	runtime.SetMutexProfileFraction(100)
	mux := http.NewServeMux()
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
