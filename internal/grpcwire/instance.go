package grpcwire

import (
	"context"

	"google.golang.org/grpc/credentials"
)

// HeaderInstance carries, on every call of a proxy, the instance id it
// runs as, so that the automator can name the instance of a call it
// refuses before it reads the request: a wrong account token is refused
// as the call arrives. A binary header (gRPC sends it base64-encoded): an
// instance id may be any printable text, which a plain header may not
// carry. It is the proxy's claim, not a credential.
const HeaderInstance = "opsgate-instance-bin"

// Instance is the per-call metadata that names a proxy's instance
// (HeaderInstance).
func Instance(id string) credentials.PerRPCCredentials { return instanceHeader(id) }

type instanceHeader string

func (h instanceHeader) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{HeaderInstance: string(h)}, nil
}

func (instanceHeader) RequireTransportSecurity() bool { return false }
