package service

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kube5s/sless/pkg/testenv"
)

// TestKubernetesLibrariesLogAsJSON: what controller-runtime and client-go
// (klog) log lands in the service's JSON log, with the service's name.
func TestKubernetesLibrariesLogAsJSON(t *testing.T) {
	out := &testenv.SyncBuffer{}
	if _, err := New(t.Context(), "probe", Common{LogLevel: "info"}, func(string) string { return "" }, out); err != nil {
		t.Fatal(err)
	}
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
