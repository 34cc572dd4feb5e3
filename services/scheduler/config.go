package main

import (
	"github.com/kube5s/sless/pkg/envconf"
	"github.com/kube5s/sless/pkg/kubeclient"
	"github.com/kube5s/sless/pkg/service"
)

type config struct {
	service.Common
	service.Deps
}

func loadConfig(getenv func(string) string) (config, error) {
	r := envconf.New(getenv)
	c := config{
		Common: service.ReadCommon(r, ":9094"),
		Deps:   service.ReadDeps(r, kubeclient.DefaultRate),
	}
	return c, r.Err()
}
