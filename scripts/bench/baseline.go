//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/opsgate/opsgate/automator/config"
	"github.com/opsgate/opsgate/automator/pki"
	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/automator/store/sqlitestore"
	"github.com/opsgate/opsgate/internal/grpcwire"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

// ---- raw gRPC echo ----

// echoService answers ExecuteOnProxy at once with a status shaped like an
// @ping result: the gRPC, TLS and protobuf cost of a call, without the queue.
type echoService struct {
	automatorv1.UnimplementedAutomatorServiceServer
}

func (echoService) ExecuteOnProxy(_ context.Context, req *automatorv1.ExecuteRequest) (*automatorv1.WorkStatus, error) {
	now := timestamppb.Now()
	return &automatorv1.WorkStatus{
		WorkId:  "w_0123456789abcdef0123456789abcdef",
		Account: req.GetAccount(),
		State:   automatorv1.State_STATE_SUCCEEDED,
		Result: &automatorv1.Result{
			Stdout:     []byte("instance_id=bench-a\nhostname=localhost\nversion=dev\nuptime=1m0s\n"),
			StartedAt:  now,
			FinishedAt: now,
			InstanceId: "bench-a",
		},
		QueuedAt:   now,
		Deadline:   now,
		ClaimedAt:  now,
		FinishedAt: now,
		InstanceId: "bench-a",
	}, nil
}

// startEcho serves echoService on a loopback port with the automator's
// certificate and the gRPC server options of `automator serve`; the
// interceptor checks that a bearer secret is present but, unlike the
// automator's, looks nothing up.
func startEcho(dir string) (addr string, stop func(), err error) {
	tlsCfg, err := pki.ServerTLS(filepath.Join(dir, config.FileCert), filepath.Join(dir, config.FileKey))
	if err != nil {
		return "", nil, err
	}
	gs := grpc.NewServer(append(grpcwire.ServerOptions(),
		grpc.Creds(credentials.NewTLS(tlsCfg)),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			if v := md.Get("authorization"); len(v) != 1 || !strings.HasPrefix(v[0], "Bearer ") {
				return nil, status.Error(codes.Unauthenticated, "no bearer secret")
			}
			return h(ctx, req)
		}),
		grpc.MaxRecvMsgSize(maxMessage),
		grpc.MaxSendMsgSize(maxMessage),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 20 * time.Second}),
	)...)
	automatorv1.RegisterAutomatorServiceServer(gs, echoService{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go func() { _ = gs.Serve(lis) }()
	return lis.Addr().String(), gs.Stop, nil
}

// ---- raw durable SQLite cycle ----

// sqliteCycle is the queue's storage work alone, done the plain way: on the
// product's schema and pragmas (WAL, synchronous=FULL, foreign keys), one
// write connection shared by n callers, and each cycle three committed
// transactions of plain statements: enqueue a unit, claim one, complete it.
// It is deliberately not the sqlitestore package, which commits the writes
// of concurrent callers together: the baseline is what SQLite and this
// disk do one transaction at a time.
func (b *bench) sqliteCycle(ctx context.Context, n int, warm, dur time.Duration) (loopResult, error) {
	db, done, err := b.rawSQLite(ctx, "sqlite-raw-")
	if err != nil {
		return loopResult{}, err
	}
	defer done()
	// Sizes of a sealed @ping command and result.
	cmd, result := randomBytes(80), randomBytes(200)
	inTx := func(ctx context.Context, fn func(tx *sql.Tx) error) error { return rawTx(ctx, db, fn) }
	res := closedLoop(ctx, n, warm, dur, watch{}, func(ctx context.Context) error {
		now := time.Now().UnixNano()
		if err := inTx(ctx, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO work (id, account, state, key_id, sealed_command, queued_at, deadline) VALUES (?, 'raw', 'queued', 1, ?, ?, ?)`,
				randomID("w_"), cmd, now, now+int64(5*time.Minute))
			return err
		}); err != nil {
			return err
		}
		claimID := randomID("c_")
		var id string
		for id == "" {
			// Another caller may have taken the unit this one queued; one
			// queued by another is then left for this one.
			if err := inTx(ctx, func(tx *sql.Tx) error {
				err := tx.QueryRowContext(ctx, `UPDATE work SET state = 'claimed', instance_id = 'raw', claim_id = ?, claimed_at = ?
WHERE id = (SELECT id FROM work WHERE account = 'raw' AND state = 'queued' AND deadline > ? ORDER BY queued_at, id LIMIT 1)
RETURNING id`, claimID, time.Now().UnixNano(), now).Scan(&id)
				if errors.Is(err, sql.ErrNoRows) {
					return nil
				}
				return err
			}); err != nil {
				return err
			}
		}
		return inTx(ctx, func(tx *sql.Tx) error {
			now := time.Now().UnixNano()
			_, err := tx.ExecContext(ctx, `UPDATE work SET state = 'succeeded', sealed_result = ?, finished_at = ?
WHERE id = ? AND state = 'claimed' AND claim_id = ? AND deadline > ?`, result, now, id, claimID, now)
			return err
		})
	})
	return res, nil
}

// emptyClaim is the cost of one claim that finds nothing (what every
// needlessly woken poller would cost): the mean time of sequential empty
// WorkClaim calls.
func (b *bench) emptyClaim(ctx context.Context, dur time.Duration) (time.Duration, error) {
	dir, err := os.MkdirTemp(b.tmp, "sqlite-empty-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "raw.db"))
	if err != nil {
		return 0, err
	}
	defer st.Close()
	n := 0
	start := time.Now()
	for time.Since(start) < dur {
		if _, err := st.WorkClaim(ctx, store.WorkClaimParams{
			Account: "raw", InstanceID: "raw", Max: 4, ClaimIDs: []string{"a", "b", "c", "d"}, Now: time.Now(),
		}); err != nil {
			return 0, err
		}
		n++
	}
	return time.Since(start) / time.Duration(n), nil
}

// ---- raw fdatasync ----

// fdatasyncRate is how many 4 KiB overwrites this file system makes
// durable per second, one after another, and how long each took: the floor
// under every durable commit (a SQLite WAL commit is a write and a sync).
func (b *bench) fdatasyncRate(dur time.Duration) (float64, []time.Duration, error) {
	f, err := os.CreateTemp(b.tmp, "fdatasync-")
	if err != nil {
		return 0, nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	const size = 1 << 20
	if _, err := f.Write(make([]byte, size)); err != nil {
		return 0, nil, err
	}
	if err := f.Sync(); err != nil {
		return 0, nil, err
	}
	buf := randomBytes(4096)
	var lat []time.Duration
	off := int64(0)
	start := time.Now()
	for time.Since(start) < dur {
		t0 := time.Now()
		if _, err := f.WriteAt(buf, off); err != nil {
			return 0, nil, err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return 0, nil, err
		}
		lat = append(lat, time.Since(t0))
		off = (off + 4096) % size
	}
	return float64(len(lat)) / time.Since(start).Seconds(), lat, nil
}

// ---- raw fork/exec ----

// forkExec starts the script with n starters at once, capturing its
// output through pipes as the proxy's runner does, and counts exits.
func forkExec(ctx context.Context, script string, n int, warm, dur time.Duration) loopResult {
	return closedLoop(ctx, n, warm, dur, watch{}, func(ctx context.Context) error {
		var out, errOut bytes.Buffer
		cmd := exec.Command(script)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("running %s: %w", script, err)
		}
		return nil
	})
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}
