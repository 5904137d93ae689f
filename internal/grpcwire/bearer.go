package grpcwire

import (
	"context"

	"google.golang.org/grpc/credentials"
)

// Bearer is the credential a client of the automator sends on every call:
// its secret (an API key, or a proxy's account token) in the metadata
// "authorization: Bearer SECRET", which the automator's auth reads. With
// requireTLS, grpc-go refuses to send it on a connection without TLS.
func Bearer(secret string, requireTLS bool) credentials.PerRPCCredentials {
	return bearer{secret: secret, tls: requireTLS}
}

type bearer struct {
	secret string
	tls    bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.secret}, nil
}

func (b bearer) RequireTransportSecurity() bool { return b.tls }
