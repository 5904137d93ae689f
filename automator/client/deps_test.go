package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestClientCarriesNoServerCode: callers link the client into their own
// programs; it must not pull in the store, the server, a database driver or
// the HTTP gateway.
func TestClientCarriesNoServerCode(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "github.com/opsgate/opsgate/automator/client").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	forbidden := []string{
		"github.com/opsgate/opsgate/automator/store",
		"github.com/opsgate/opsgate/automator/server",
		"github.com/opsgate/opsgate/automator/gateway",
		"github.com/opsgate/opsgate/proto/gateway",
		"github.com/grpc-ecosystem/grpc-gateway",
		"github.com/jackc/pgx",
		"modernc.org/sqlite",
		"database/sql",
	}
	for _, d := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if d == f || strings.HasPrefix(d, f+"/") {
				t.Errorf("automator/client depends on %s", d)
			}
		}
	}
}
