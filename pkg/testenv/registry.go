package testenv

import (
	"net"
	"os"
	"testing"
	"time"
)

// Registry returns the address (host:port) of the test OCI registry, the
// CNCF Distribution registry hack/deps.sh starts on loopback. Each test
// pushes to repositories of its own name (Name), so runs do not meet.
func Registry(t testing.TB) string {
	t.Helper()
	addr := os.Getenv("SLESS_TEST_REGISTRY")
	if addr == "" {
		t.Fatalf("SLESS_TEST_REGISTRY is not set; %s", hint)
	}
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		t.Fatalf("the registry is not reachable at %s: %v; %s", addr, err, hint)
	}
	_ = c.Close()
	return addr
}
