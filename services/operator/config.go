package main

import (
	"net/netip"
	"strings"

	"github.com/kube5s/sless/pkg/envconf"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/service"
)

type config struct {
	service.Common
	Kubeconfig      string   // KUBECONFIG: empty in a cluster
	RabbitURL       string   // SLESS_RABBITMQ_URL
	ExecutionDriver string   // SLESS_EXECUTION_DRIVER: local or kubernetes
	LeaderElect     bool     // SLESS_LEADER_ELECT: on when running several replicas
	Namespace       string   // SLESS_NAMESPACE: the sless system namespace (leases, policies)
	PublicURL       string   // SLESS_PUBLIC_URL: the gateway's public base URL
	ClusterCIDRs    []string // SLESS_CLUSTER_CIDRS: ranges functions may not reach
	S3              objstore.Config
}

func loadConfig(getenv func(string) string) (config, error) {
	r := envconf.New(getenv)
	c := config{
		Common:          service.ReadCommon(r, ":9092"),
		Kubeconfig:      r.String("KUBECONFIG", ""),
		RabbitURL:       r.URL("SLESS_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/", "amqp", "amqps"),
		ExecutionDriver: r.OneOf("SLESS_EXECUTION_DRIVER", "kubernetes", "local", "kubernetes"),
		LeaderElect:     r.Bool("SLESS_LEADER_ELECT", false),
		Namespace:       r.String("SLESS_NAMESPACE", "sless-system"),
		PublicURL:       strings.TrimSuffix(r.URL("SLESS_PUBLIC_URL", "http://127.0.0.1:8080", "http", "https"), "/"),
		S3:              objstore.ReadConfig(r),
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
