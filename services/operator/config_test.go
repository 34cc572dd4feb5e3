package main

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kube5s/sless/services/operator/internal/autoscale"
)

func TestConfigReportsEveryBrokerSettingProblem(t *testing.T) {
	env := map[string]string{
		"SLESS_RUNTIMES_DIR":            "../../runtimes",
		"SLESS_RABBITMQ_URL":            "amqp://127.0.0.1:5672/",
		"SLESS_RABBITMQ_MANAGEMENT_URL": "ftp://broker:15672",
		"SLESS_TENANT_BROKER_URL":       "http://broker:5672",
	}
	_, err := loadConfig(func(k string) string { return env[k] })
	if err == nil {
		t.Fatal("loadConfig accepted broken broker settings")
	}
	for _, want := range []string{"SLESS_RABBITMQ_MANAGEMENT_URL", "SLESS_RABBITMQ_MANAGEMENT_USER", "SLESS_TENANT_BROKER_URL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
}

func TestConfigBrokerDefaultsComeFromTheBrokerURL(t *testing.T) {
	env := map[string]string{"SLESS_RUNTIMES_DIR": "../../runtimes", "SLESS_RABBITMQ_URL": "amqps://ops:s3cret@mq.internal:5671/platform",
		"SLESS_S3_ENDPOINT": "127.0.0.1:9", "SLESS_S3_ACCESS_KEY": "a", "SLESS_S3_SECRET_KEY": "b"}
	c, err := loadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.ManagementURL != "http://127.0.0.1:15672" || c.ManagementUser != "ops" || c.ManagementPassword != "s3cret" {
		t.Errorf("management %s as %s/%s", c.ManagementURL, c.ManagementUser, c.ManagementPassword)
	}
	if got := c.TenantBrokerURL.String(); got != "amqps://mq.internal:5671" {
		t.Errorf("tenant broker URL %s, want the platform broker's address without its user and vhost", got)
	}
}

func TestConfigVersionDrainPeriod(t *testing.T) {
	env := map[string]string{"SLESS_RUNTIMES_DIR": "../../runtimes", "SLESS_RABBITMQ_URL": "amqp://u:p@127.0.0.1:5672/",
		"SLESS_S3_ENDPOINT": "127.0.0.1:9", "SLESS_S3_ACCESS_KEY": "a", "SLESS_S3_SECRET_KEY": "b"}
	c, err := loadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.DrainPeriod != 120*time.Second {
		t.Errorf("default drain period %s, want 120s", c.DrainPeriod)
	}
	for v, ok := range map[string]bool{"30s": true, "0s": false, "soon": false} {
		env["SLESS_VERSION_DRAIN_PERIOD"] = v
		_, err := loadConfig(func(k string) string { return env[k] })
		if (err == nil) != ok || err != nil && !strings.Contains(err.Error(), "SLESS_VERSION_DRAIN_PERIOD") {
			t.Errorf("SLESS_VERSION_DRAIN_PERIOD=%s: %v", v, err)
		}
	}
}

// TestConfigNamesEveryMissingWrapper: with the local driver, a runtimes
// directory without the wrappers is refused, naming each wrapper the
// driver would start (driver.LocalCommands), one per runtime.
func TestConfigNamesEveryMissingWrapper(t *testing.T) {
	env := map[string]string{"SLESS_RUNTIMES_DIR": t.TempDir(), "SLESS_RABBITMQ_URL": "amqp://u:p@127.0.0.1:5672/",
		"SLESS_S3_ENDPOINT": "127.0.0.1:9", "SLESS_S3_ACCESS_KEY": "a", "SLESS_S3_SECRET_KEY": "b"}
	_, err := loadConfig(func(k string) string { return env[k] })
	if err == nil {
		t.Fatal("loadConfig accepted a runtimes directory without the wrappers")
	}
	for _, want := range []string{"python3.11/runtime.py not found", "nodejs20/runtime.js not found"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
}

func TestConfigScalingDefaults(t *testing.T) {
	env := map[string]string{"SLESS_RUNTIMES_DIR": "../../runtimes", "SLESS_RABBITMQ_URL": "amqp://u:p@127.0.0.1:5672/",
		"SLESS_S3_ENDPOINT": "127.0.0.1:9", "SLESS_S3_ACCESS_KEY": "a", "SLESS_S3_SECRET_KEY": "b"}
	c, err := loadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.ScalingDefaults != autoscale.BuiltIn {
		t.Errorf("scaling defaults without settings %+v, want the built-in %+v", c.ScalingDefaults, autoscale.BuiltIn)
	}
	env["SLESS_SCALING_DEFAULT_MIN_REPLICAS"], env["SLESS_SCALING_DEFAULT_MAX_REPLICAS"] = "0", "5"
	env["SLESS_SCALING_DEFAULT_TARGET_PERCENT"], env["SLESS_SCALING_DEFAULT_SCALE_DOWN_DELAY_SECONDS"] = "50", "30"
	env["SLESS_SCALING_DEFAULT_MAX_BUFFERED_REQUESTS"] = "200"
	if c, err = loadConfig(func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	want := autoscale.Defaults{MinReplicas: 0, MaxReplicas: 5, TargetPercent: 50, ScaleDownDelay: 30 * time.Second, MaxBufferedRequests: 200}
	if c.ScalingDefaults != want {
		t.Errorf("scaling defaults %+v, want %+v", c.ScalingDefaults, want)
	}
	env["SLESS_SCALING_DEFAULT_MIN_REPLICAS"], env["SLESS_SCALING_DEFAULT_TARGET_PERCENT"] = "6", "0"
	env["SLESS_SCALING_DEFAULT_MAX_BUFFERED_REQUESTS"] = "many"
	_, err = loadConfig(func(k string) string { return env[k] })
	for _, want := range []string{"SLESS_SCALING_DEFAULT_MIN_REPLICAS (6) must not exceed", "SLESS_SCALING_DEFAULT_TARGET_PERCENT", "SLESS_SCALING_DEFAULT_MAX_BUFFERED_REQUESTS"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s: %v", want, err)
		}
	}
}

// TestConfigKubeRateReachesTheClient: SLESS_KUBE_QPS and SLESS_KUBE_BURST
// reach the rest.Config run builds its manager from; unset, the
// operator's default is above the former fixed QPS 50 / burst 100, which
// bounded the bulk creation of a thousand tenants (docs/scale.md).
func TestConfigKubeRateReachesTheClient(t *testing.T) {
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
	base := map[string]string{"SLESS_RUNTIMES_DIR": "../../runtimes", "SLESS_RABBITMQ_URL": "amqp://u:p@127.0.0.1:5672/",
		"SLESS_S3_ENDPOINT": "127.0.0.1:9", "SLESS_S3_ACCESS_KEY": "a", "SLESS_S3_SECRET_KEY": "b", "KUBECONFIG": kubeconfig}
	for _, tc := range []struct {
		name       string
		qps, burst string
		wantQPS    float32
		wantBurst  int
		wrong      []string // the settings the error must name; none: no error
	}{
		{name: "default", wantQPS: 200, wantBurst: 400},
		{name: "set", qps: "500", burst: "1000", wantQPS: 500, wantBurst: 1000},
		{name: "zero", qps: "0", burst: "0", wrong: []string{"SLESS_KUBE_QPS", "SLESS_KUBE_BURST"}},
		{name: "negative", qps: "-1", wrong: []string{"SLESS_KUBE_QPS"}},
		{name: "not a number", qps: "lots", burst: "100.5", wrong: []string{"SLESS_KUBE_QPS", "SLESS_KUBE_BURST"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := maps.Clone(base)
			env["SLESS_KUBE_QPS"], env["SLESS_KUBE_BURST"] = tc.qps, tc.burst
			c, err := loadConfig(func(k string) string { return env[k] })
			if len(tc.wrong) > 0 {
				for _, k := range tc.wrong {
					if err == nil || !strings.Contains(err.Error(), k+"=") {
						t.Errorf("error does not name %s: %v", k, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			kcfg, err := c.RESTConfig()
			if err != nil {
				t.Fatal(err)
			}
			if kcfg.QPS != tc.wantQPS || kcfg.Burst != tc.wantBurst {
				t.Errorf("rest.Config QPS %v burst %d, want %v and %d", kcfg.QPS, kcfg.Burst, tc.wantQPS, tc.wantBurst)
			}
		})
	}
}
