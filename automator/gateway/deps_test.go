package gateway_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestProxyDoesNotLinkTheGateway: the generated gateway lives in its own
// package (protoc-gen-grpc-gateway standalone=true) so that the proxy,
// which imports proto/automator/v1, carries no HTTP gateway.
func TestProxyDoesNotLinkTheGateway(t *testing.T) {
	for _, goos := range []string{"linux", "windows"} {
		cmd := exec.Command("go", "list", "-deps", "github.com/opsgate/opsgate/proxy/cmd/proxy")
		cmd.Env = append(cmd.Environ(), "GOOS="+goos)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps (GOOS=%s): %v", goos, err)
		}
		for _, d := range strings.Fields(string(out)) {
			if strings.HasPrefix(d, "github.com/grpc-ecosystem/grpc-gateway") || strings.HasPrefix(d, "github.com/opsgate/opsgate/proto/gateway") {
				t.Errorf("GOOS=%s: the proxy depends on %s", goos, d)
			}
		}
	}
}
