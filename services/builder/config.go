package main

import (
	"github.com/kube5s/sless/pkg/envconf"
	"github.com/kube5s/sless/pkg/objstore"
	"github.com/kube5s/sless/pkg/service"
)

type config struct {
	service.Common
	Driver      string // SLESS_BUILD_DRIVER: local or kubernetes
	Kubeconfig  string // KUBECONFIG: used by the kubernetes driver
	RabbitURL   string // SLESS_RABBITMQ_URL
	PostgresURL string // SLESS_POSTGRES_URL
	Migrate     bool   // SLESS_MIGRATE
	S3          objstore.Config
}

func loadConfig(getenv func(string) string) (config, error) {
	r := envconf.New(getenv)
	c := config{
		Common:      service.ReadCommon(r, ":9091"),
		Driver:      r.OneOf("SLESS_BUILD_DRIVER", "local", "local", "kubernetes"),
		Kubeconfig:  r.String("KUBECONFIG", ""),
		RabbitURL:   r.URL("SLESS_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/", "amqp", "amqps"),
		PostgresURL: r.URL("SLESS_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/sless?sslmode=disable", "postgres", "postgresql"),
		Migrate:     r.Bool("SLESS_MIGRATE", true),
		S3:          objstore.ReadConfig(r),
	}
	return c, r.Err()
}
