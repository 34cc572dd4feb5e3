package kubeclient

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"

	"github.com/kube5s/sless/pkg/envconf"
)

func TestReadRate(t *testing.T) {
	def := Rate{QPS: 7, Burst: 9}
	for _, tc := range []struct {
		name       string
		env        map[string]string
		want       Rate
		wrongNames []string // the settings the error must name; none: no error
	}{
		{name: "unset", want: def},
		{name: "both", env: map[string]string{"SLESS_KUBE_QPS": "300", "SLESS_KUBE_BURST": "600"}, want: Rate{QPS: 300, Burst: 600}},
		{name: "qps only", env: map[string]string{"SLESS_KUBE_QPS": "300"}, want: Rate{QPS: 300, Burst: 9}},
		{name: "zero", env: map[string]string{"SLESS_KUBE_QPS": "0", "SLESS_KUBE_BURST": "0"}, wrongNames: []string{"SLESS_KUBE_QPS", "SLESS_KUBE_BURST"}},
		{name: "negative", env: map[string]string{"SLESS_KUBE_QPS": "-50"}, wrongNames: []string{"SLESS_KUBE_QPS"}},
		{name: "not a number", env: map[string]string{"SLESS_KUBE_QPS": "fast", "SLESS_KUBE_BURST": "1e3"}, wrongNames: []string{"SLESS_KUBE_QPS", "SLESS_KUBE_BURST"}},
		{name: "fraction", env: map[string]string{"SLESS_KUBE_QPS": "2.5"}, wrongNames: []string{"SLESS_KUBE_QPS"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := envconf.New(func(k string) string { return tc.env[k] })
			got := ReadRate(r, def)
			err := r.Err()
			if len(tc.wrongNames) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if got != tc.want {
					t.Errorf("ReadRate = %+v, want %+v", got, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("ReadRate accepted %v: %+v", tc.env, got)
			}
			for _, k := range tc.wrongNames {
				if !strings.Contains(err.Error(), k+"=") {
					t.Errorf("error does not name %s: %v", k, err)
				}
			}
		})
	}
}

// TestConfigLimitsClientsToTheRate: the rate reaches the rest.Config and
// the token bucket of a client built from it.
func TestConfigLimitsClientsToTheRate(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Config(kubeconfig, Rate{QPS: 300, Burst: 600})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QPS != 300 || cfg.Burst != 600 {
		t.Errorf("rest.Config QPS %v burst %d, want 300 and 600", cfg.QPS, cfg.Burst)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := cs.CoreV1().RESTClient().GetRateLimiter().QPS(); got != 300 {
		t.Errorf("a client's rate limiter allows %v requests/s, want 300", got)
	}
}
