module github.com/kube5s/sless/runtimes

go 1.26.0
