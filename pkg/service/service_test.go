package service

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kube5s/sless/pkg/testenv"
)

var (
	probeOnce sync.Once
	probe     *Service
	probeErr  error
	probeLog  = &testenv.SyncBuffer{}
)

// probeService is this test binary's one Service, logging to probeLog:
// New sets the process's loggers, and controller-runtime takes only the
// first it is given, so the tests of this package share one.
func probeService(t *testing.T) *Service {
	t.Helper()
	probeOnce.Do(func() {
		probe, probeErr = New(context.Background(), "probe", Common{LogLevel: "info", OpsAddr: "127.0.0.1:0"}, func(string) string { return "" }, probeLog)
	})
	if probeErr != nil {
		t.Fatal(probeErr)
	}
	return probe
}

// TestKubernetesLibrariesLogAsJSON: what controller-runtime and client-go
// (klog) log lands in the service's JSON log, with the service's name.
func TestKubernetesLibrariesLogAsJSON(t *testing.T) {
	probeService(t)
	out := probeLog
	ctrllog.Log.WithName("reconciler").Error(nil, "reconcile failed", "object", "acme/hello")
	klog.InfoS("watch restarted", "resource", "functions")
	klog.Flush()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	found := map[string]bool{}
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("not a JSON log line: %q", l)
		}
		if m, _ := rec["msg"].(string); m != "" {
			found[m] = true
		}
	}
	for _, want := range []string{"reconcile failed", "watch restarted"} {
		if !found[want] {
			t.Errorf("%q did not reach the service log; got %q", want, lines)
		}
	}
}
