package main

import (
	"github.com/kube5s/sless/pkg/envconf"
	"github.com/kube5s/sless/pkg/service"
)

type config struct {
	service.Common
	Kubeconfig      string // KUBECONFIG: empty in a cluster
	RabbitURL       string // SLESS_RABBITMQ_URL
	ExecutionDriver string // SLESS_EXECUTION_DRIVER: local or kubernetes
	LeaderElect     bool   // SLESS_LEADER_ELECT: on when running several replicas
	Namespace       string // SLESS_NAMESPACE: the sless system namespace (leases)
}

func loadConfig(getenv func(string) string) (config, error) {
	r := envconf.New(getenv)
	c := config{
		Common:          service.ReadCommon(r, ":9092"),
		Kubeconfig:      r.String("KUBECONFIG", ""),
		RabbitURL:       r.URL("SLESS_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/", "amqp", "amqps"),
		ExecutionDriver: r.OneOf("SLESS_EXECUTION_DRIVER", "local", "local", "kubernetes"),
		LeaderElect:     r.Bool("SLESS_LEADER_ELECT", false),
		Namespace:       r.String("SLESS_NAMESPACE", "sless-system"),
	}
	return c, r.Err()
}
