package server

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/opsgate/opsgate/automator/store"
	"github.com/opsgate/opsgate/crypto"
	automatorv1 "github.com/opsgate/opsgate/proto/automator/v1"
)

type ctxKey int

const (
	keyAccount ctxKey = iota
	keyCaller
)

// accountFrom is the account whose token authenticated a proxy call.
func accountFrom(ctx context.Context) string {
	s, _ := ctx.Value(keyAccount).(string)
	return s
}

// callerFrom is the API key id that authenticated a caller.
func callerFrom(ctx context.Context) string {
	s, _ := ctx.Value(keyCaller).(string)
	return s
}

// UnaryInterceptor authenticates every call: proxy methods with an account
// token, caller methods with an API key, both as "authorization: Bearer".
func (s *Server) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		ctx, err := s.authenticate(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

var (
	proxyPrefix  = "/" + automatorv1.ProxyService_ServiceDesc.ServiceName + "/"
	callerPrefix = "/" + automatorv1.AutomatorService_ServiceDesc.ServiceName + "/"
)

func (s *Server) authenticate(ctx context.Context, method string) (context.Context, error) {
	secret, err := bearer(ctx)
	switch {
	case strings.HasPrefix(method, proxyPrefix):
		if err != nil {
			return nil, s.authFailed(ctx, method, err.Error())
		}
		a, err := s.store.AccountGetByTokenHash(ctx, crypto.HashToken(secret))
		if errors.Is(err, store.ErrNotFound) {
			return nil, s.authFailed(ctx, method, "invalid account token")
		}
		if err != nil {
			return nil, s.internal(ctx, "looking up account token", err)
		}
		return context.WithValue(ctx, keyAccount, a.Name), nil
	case strings.HasPrefix(method, callerPrefix):
		if err != nil {
			return nil, s.authFailed(ctx, method, err.Error())
		}
		k, err := s.store.APIKeyGetByHash(ctx, crypto.HashToken(secret))
		if errors.Is(err, store.ErrNotFound) {
			return nil, s.authFailed(ctx, method, "invalid API key")
		}
		if err != nil {
			return nil, s.internal(ctx, "looking up API key", err)
		}
		return context.WithValue(ctx, keyCaller, k.ID), nil
	}
	return ctx, nil // health and reflection services carry no secrets
}

func bearer(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) != 1 {
		return "", errors.New("missing authorization metadata (Bearer token)")
	}
	tok, ok := strings.CutPrefix(vals[0], "Bearer ")
	if !ok || tok == "" {
		return "", errors.New("authorization metadata is not \"Bearer <secret>\"")
	}
	return tok, nil
}

// authFailed logs the failure with the peer address (never the secret) and
// returns the error the client sees.
func (s *Server) authFailed(ctx context.Context, method, why string) error {
	addr := ""
	if p, ok := peer.FromContext(ctx); ok {
		addr = p.Addr.String()
	}
	s.log.Warn("authentication failed", "method", method, "peer", addr, "reason", why)
	return status.Error(codes.Unauthenticated, why)
}

// internal logs err and returns a generic Internal status: details stay in
// the log.
func (s *Server) internal(ctx context.Context, doing string, err error) error {
	s.log.Error("internal error", "doing", doing, "err", err)
	return status.Errorf(codes.Internal, "internal error while %s", doing)
}
