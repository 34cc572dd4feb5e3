package main

import (
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	slessv1 "github.com/kube5s/sless/pkg/apis/sless/v1alpha1"
	"github.com/kube5s/sless/pkg/envconf"
	"github.com/kube5s/sless/pkg/kubeclient"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/rabbit"
	"github.com/kube5s/sless/pkg/service"
	"github.com/kube5s/sless/services/operator/internal/autoscale"
	"github.com/kube5s/sless/services/operator/internal/brokeradmin"
	"github.com/kube5s/sless/services/operator/internal/controller"
	"github.com/kube5s/sless/services/operator/internal/driver"
)

type config struct {
	service.Common
	service.Deps
	ExecutionDriver string   // SLESS_EXECUTION_DRIVER: local or kubernetes
	LeaderElect     bool     // SLESS_LEADER_ELECT: on when running several replicas
	Namespace       string   // SLESS_NAMESPACE: the sless system namespace (leases, policies)
	PublicURL       string   // SLESS_PUBLIC_URL: the gateway's public base URL
	ClusterCIDRs    []string // SLESS_CLUSTER_CIDRS: ranges functions may not reach
	// QuotaController: a quota controller counts the tenants' quotas and a
	// tenant is Ready only once it has (SLESS_QUOTA_CONTROLLER; on with the
	// kubernetes driver: every cluster runs kube-controller-manager; off for
	// an API server without one, as in envtest).
	QuotaController bool
	// DrainPeriod is how long a version that lost its traffic keeps
	// running for in-flight work (SLESS_VERSION_DRAIN_PERIOD, default 120s).
	DrainPeriod time.Duration
	// RetainBuilds is how many of a function's newest builds the build
	// sweep keeps, besides those a version uses (SLESS_BUILD_RETAIN,
	// default 10); BuildSweepInterval is how often it looks at a function
	// (SLESS_BUILD_SWEEP_INTERVAL, default 1h).
	RetainBuilds       int
	BuildSweepInterval time.Duration
	S3                 objstore.Config
	// The RabbitMQ management API, where the operator keeps each tenant's
	// vhost and user; its user needs the administrator tag.
	ManagementURL      string   // SLESS_RABBITMQ_MANAGEMENT_URL
	ManagementUser     string   // SLESS_RABBITMQ_MANAGEMENT_USER: default the user of SLESS_RABBITMQ_URL
	ManagementPassword string   // SLESS_RABBITMQ_MANAGEMENT_PASSWORD: default its password
	TenantBrokerURL    *url.URL // SLESS_TENANT_BROKER_URL: the broker address tenants use; default that of SLESS_RABBITMQ_URL
	// What each tenant's vhost may hold (brokeradmin.DefaultLimits):
	// SLESS_TENANT_BROKER_MAX_QUEUES, SLESS_TENANT_BROKER_MAX_CONNECTIONS,
	// SLESS_TENANT_QUEUE_MAX_MESSAGES, SLESS_TENANT_QUEUE_MAX_BYTES.
	TenantBrokerLimits brokeradmin.Limits
	// What the scaler gives the scaling settings a function leaves unset
	// (autoscale.BuiltIn; the chart's scaling.defaults):
	// SLESS_SCALING_DEFAULT_MIN_REPLICAS, SLESS_SCALING_DEFAULT_MAX_REPLICAS,
	// SLESS_SCALING_DEFAULT_TARGET_PERCENT (of a replica's concurrency),
	// SLESS_SCALING_DEFAULT_SCALE_DOWN_DELAY_SECONDS and
	// SLESS_SCALING_DEFAULT_MAX_BUFFERED_REQUESTS.
	ScalingDefaults autoscale.Defaults
	// local driver
	RuntimesDir    string // SLESS_RUNTIMES_DIR: holds python3.11/runtime.py and nodejs20/runtime.js
	Python         string // SLESS_PYTHON: the Python 3.11 interpreter
	Node           string // SLESS_NODE: the Node.js 20 binary
	FunctionLogDir string // SLESS_FUNCTION_LOG_DIR: one log file per function
	// ArtifactDir is where the builder's local driver writes artifacts
	// (SLESS_ARTIFACT_DIR, the builder's setting); the operator removes a
	// version's artifact below it when retention deletes the last version
	// that ran it. Empty: artifacts are left.
	ArtifactDir string
	// The registry builds push to (SLESS_REGISTRY, SLESS_REGISTRY_INSECURE,
	// credentials from $DOCKER_CONFIG/config.json): the operator deletes a
	// version's image by digest when the last version that ran it goes.
	// Empty: images are left (an Event names each).
	Registry         string
	RegistryInsecure bool
}

// operatorKubeRate is the operator's default client rate. Its bulk work
// (many tenants or functions created at once, every object reconciled
// after a restart) is bounded by it: a function's creation costs two
// writes (the finalizer, the status), a tenant's about ten. At the former
// fixed 50/100 the 1,000-tenant step of make bench-scale ran at the limit
// with work waiting in both queues (docs/scale.md).
var operatorKubeRate = kubeclient.Rate{QPS: 200, Burst: 400}

func loadConfig(getenv func(string) string) (config, error) {
	r := envconf.New(getenv)
	c := config{
		Common:          service.ReadCommon(r, ":9092"),
		Deps:            service.ReadDeps(r, operatorKubeRate),
		ExecutionDriver: r.OneOf("SLESS_EXECUTION_DRIVER", "local", "local", "kubernetes"),
		LeaderElect:     r.Bool("SLESS_LEADER_ELECT", false),
		Namespace:       r.String("SLESS_NAMESPACE", "sless-system"),
		PublicURL:       strings.TrimSuffix(r.URL("SLESS_PUBLIC_URL", "http://127.0.0.1:8080", "http", "https"), "/"),
		S3:              objstore.ReadConfig(r),
		RuntimesDir:     r.String("SLESS_RUNTIMES_DIR", "runtimes"),
		Python:          r.String("SLESS_PYTHON", "python3"),
		Node:            r.String("SLESS_NODE", "node"),
		FunctionLogDir:  r.String("SLESS_FUNCTION_LOG_DIR", os.TempDir()),
	}
	c.QuotaController = r.Bool("SLESS_QUOTA_CONTROLLER", c.ExecutionDriver == "kubernetes")
	c.ArtifactDir = r.String("SLESS_ARTIFACT_DIR", "")
	c.Registry = r.String("SLESS_REGISTRY", "")
	c.RegistryInsecure = r.Bool("SLESS_REGISTRY_INSECURE", false)
	c.DrainPeriod = r.Duration("SLESS_VERSION_DRAIN_PERIOD", controller.DefaultDrainPeriod)
	if c.DrainPeriod <= 0 {
		r.Failf("SLESS_VERSION_DRAIN_PERIOD must be positive, got %s", c.DrainPeriod)
	}
	c.RetainBuilds = r.Int("SLESS_BUILD_RETAIN", controller.DefaultRetainBuilds, 1, 10_000)
	c.BuildSweepInterval = r.Duration("SLESS_BUILD_SWEEP_INTERVAL", controller.DefaultBuildSweepInterval)
	if c.BuildSweepInterval <= 0 {
		r.Failf("SLESS_BUILD_SWEEP_INTERVAL must be positive, got %s", c.BuildSweepInterval)
	}
	d := brokeradmin.DefaultLimits
	c.TenantBrokerLimits = brokeradmin.Limits{
		Queues:      r.Int("SLESS_TENANT_BROKER_MAX_QUEUES", d.Queues, 10, 100_000),
		Connections: r.Int("SLESS_TENANT_BROKER_MAX_CONNECTIONS", d.Connections, 5, 100_000),
		Queue: rabbit.Limits{
			Messages: r.Int("SLESS_TENANT_QUEUE_MAX_MESSAGES", d.Queue.Messages, 100, 100_000_000),
			Bytes:    int64(r.Int("SLESS_TENANT_QUEUE_MAX_BYTES", int(d.Queue.Bytes), 1<<20, 1<<40)),
		},
	}
	sd := autoscale.BuiltIn
	// The ranges are the CRD's for the same fields of spec.scaling.
	c.ScalingDefaults = autoscale.Defaults{
		MinReplicas:         int32(r.Int("SLESS_SCALING_DEFAULT_MIN_REPLICAS", int(sd.MinReplicas), 0, 100)),
		MaxReplicas:         int32(r.Int("SLESS_SCALING_DEFAULT_MAX_REPLICAS", int(sd.MaxReplicas), 1, 100)),
		TargetPercent:       int32(r.Int("SLESS_SCALING_DEFAULT_TARGET_PERCENT", int(sd.TargetPercent), 1, 100)),
		ScaleDownDelay:      time.Duration(r.Int("SLESS_SCALING_DEFAULT_SCALE_DOWN_DELAY_SECONDS", int(sd.ScaleDownDelay/time.Second), 1, 3600)) * time.Second,
		MaxBufferedRequests: int32(r.Int("SLESS_SCALING_DEFAULT_MAX_BUFFERED_REQUESTS", int(sd.MaxBufferedRequests), 1, 100_000)),
	}
	if d := c.ScalingDefaults; d.MinReplicas > d.MaxReplicas {
		r.Failf("SLESS_SCALING_DEFAULT_MIN_REPLICAS (%d) must not exceed SLESS_SCALING_DEFAULT_MAX_REPLICAS (%d)", d.MinReplicas, d.MaxReplicas)
	}
	c.ManagementURL = strings.TrimSuffix(r.URL("SLESS_RABBITMQ_MANAGEMENT_URL", "http://127.0.0.1:15672", "http", "https"), "/")
	platform, _ := url.Parse(c.RabbitURL) // r.URL reported a bad one
	var user, password string
	if platform != nil && platform.User != nil {
		user = platform.User.Username()
		password, _ = platform.User.Password()
	}
	c.ManagementUser = r.String("SLESS_RABBITMQ_MANAGEMENT_USER", user)
	c.ManagementPassword = r.String("SLESS_RABBITMQ_MANAGEMENT_PASSWORD", password)
	if c.ManagementUser == "" {
		r.Failf("SLESS_RABBITMQ_MANAGEMENT_USER is required when SLESS_RABBITMQ_URL names no user")
	}
	tenantDefault := ""
	if platform != nil {
		tenantDefault = (&url.URL{Scheme: platform.Scheme, Host: platform.Host}).String()
	}
	c.TenantBrokerURL, _ = url.Parse(r.URL("SLESS_TENANT_BROKER_URL", tenantDefault, "amqp", "amqps"))
	if c.ExecutionDriver == "local" {
		// The wrappers the local driver will start (driver.LocalCommands,
		// the one list of them), in the runtimes' order.
		commands := driver.LocalCommands(c.Python, c.Node, c.RuntimesDir)
		for _, rt := range slessv1.Runtimes() {
			cmd := commands[rt]
			if len(cmd) == 0 {
				r.Failf("the local driver has no command for runtime %s", rt)
				continue
			}
			f := cmd[len(cmd)-1]
			if _, err := os.Stat(f); err != nil {
				r.Failf("SLESS_RUNTIMES_DIR=%s: %s not found (the local driver runs the wrappers from there)", c.RuntimesDir, f)
			}
		}
	}
	for _, cidr := range strings.Split(r.String("SLESS_CLUSTER_CIDRS", "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,100.64.0.0/10"), ",") {
		cidr = strings.TrimSpace(cidr)
		if _, err := netip.ParsePrefix(cidr); err != nil {
			r.Failf("SLESS_CLUSTER_CIDRS: %q is not a CIDR", cidr)
			continue
		}
		c.ClusterCIDRs = append(c.ClusterCIDRs, cidr)
	}
	return c, r.Err()
}
