module github.com/kube5s/sless/cli

go 1.26.0

require (
	github.com/google/go-cmp v0.7.0
	github.com/kube5s/sless/pkg v0.0.0
	github.com/spf13/cobra v1.10.2
	golang.org/x/term v0.47.0
	sigs.k8s.io/yaml v1.6.0
)

require (
	github.com/apapsch/go-jsonmerge/v2 v2.0.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/oapi-codegen/runtime v1.6.0 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	golang.org/x/sys v0.50.0 // indirect
)

replace github.com/kube5s/sless/pkg => ../pkg
