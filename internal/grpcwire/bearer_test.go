package grpcwire_test

import (
	"context"
	"testing"

	"github.com/opsgate/opsgate/internal/grpcwire"
)

// TestBearerSendsTheSecretAsTheAutomatorReadsIt: one "authorization"
// value, "Bearer SECRET", and TLS required only when asked.
func TestBearerSendsTheSecretAsTheAutomatorReadsIt(t *testing.T) {
	for _, requireTLS := range []bool{true, false} {
		b := grpcwire.Bearer("s3cret", requireTLS)
		md, err := b.GetRequestMetadata(context.Background())
		if err != nil || len(md) != 1 || md["authorization"] != "Bearer s3cret" {
			t.Errorf("metadata %v, %v; want authorization: Bearer s3cret alone", md, err)
		}
		if got := b.RequireTransportSecurity(); got != requireTLS {
			t.Errorf("Bearer(_, %v).RequireTransportSecurity() = %v", requireTLS, got)
		}
	}
}
