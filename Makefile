# sless: functions as a service for Kubernetes. `make help` lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# hack/cluster's TestCluster brings up the one-node cluster (root; its
# binaries come from `make cluster-build`, cached by version).
MODULES := pkg migrations runtimes services/gateway services/builder services/operator services/invoker services/scheduler hack/devcluster deploy/helm cli e2e terraform hack/cluster
LINT_MODULES := $(MODULES)
SERVICES := gateway builder operator invoker scheduler
GENERATED := pkg/apis/sless/v1alpha1/zz_generated.deepcopy.go pkg/apis/sless/crds/*.yaml deploy/helm/sless/files/crds/*.yaml \
	pkg/client/openapi.yaml pkg/client/client.gen.go
DEPS_ENV = eval "$$(hack/deps.sh env)"

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: dev
dev: ## run the whole platform locally (local profile); Ctrl-C stops it
	@hack/dev.sh

.PHONY: deps
deps: ## build the cached servers and start PostgreSQL, RabbitMQ and MinIO
	@hack/deps.sh up

.PHONY: tofu
tofu: ## build OpenTofu (cached) and link it as bin/tofu; prints its path
	@mkdir -p bin
	@ln -sf "$$(hack/deps.sh tofu)" bin/tofu
	@echo "$(CURDIR)/bin/tofu"

.PHONY: build
build: ## build the five service binaries and the sless CLI into bin/
	@mkdir -p bin
	@for s in $(SERVICES); do (cd services/$$s && go build -o ../../bin/$$s .); done
	@cd cli && go build -o ../bin/sless .
	@echo "built: $(addprefix bin/,$(SERVICES)) bin/sless"

.PHONY: images
images: ## build the five platform images with ko into the local registry and print their digests
	@hack/deps.sh registry up
	@hack/images.sh

.PHONY: runtime-bases
runtime-bases: ## build the Python and Node runtime base images (cached; root the first time) into the local registry and print their digests
	@hack/deps.sh registry up
	@hack/runtime-bases.sh push

.PHONY: test-images
test-images: ## build the platform images (make images) and check each one pulled back from the registry
	@hack/deps.sh registry up
	@$(DEPS_ENV); cd hack/tools/ko && GOWORK=off go test -count=1 -timeout 25m ./...

.PHONY: test
# hack/test.sh: two lanes side by side, the module tests and the
# platform-wide ones (cluster, e2e, Terraform); pkg/ and the services'
# internal packages run under the race detector (the concurrent code lives
# there); a service's main package, whose tests start whole services and
# kill them, runs without it (see docs/contributing.md). The runtime bases
# (cached; the first build needs root) are what the builder's
# assembled-image test runs on. The Terraform provider's acceptance tests
# (TF_ACC=1) drive OpenTofu against a make dev platform of their own.
test: ## start the real dependencies and run every test
	@hack/test.sh

.PHONY: print-modules
print-modules:
	@echo $(MODULES)

.PHONY: test-cluster cluster-build cluster-up cluster-try cluster-down
cluster-build: ## build the one-node cluster's programs (cached by version under ~/.cache/sless)
	@hack/cluster.sh build
test-cluster: deps ## bring up the one-node cluster (hack/cluster.sh), run its acceptance test, take it down
	@$(DEPS_ENV); cd hack/cluster && go test -count=1 -timeout 40m -v ./...
cluster-up: deps ## build (cached) and start the one-node Kubernetes cluster; `hack/cluster.sh env` points kubectl/client-go at it
	@hack/cluster.sh up
cluster-try: deps ## the one-node cluster with sless installed from docs/install.md's commands; prints the gateway's URL and an admin token
	@hack/cluster.sh try
cluster-down: ## stop the one-node cluster and remove everything it made
	@hack/cluster.sh down

.PHONY: test-runtimes
test-runtimes: ## run the Python and Node runtime wrappers' own tests
	@echo "== python3 -m unittest runtimes/python3.11"
	@cd runtimes/python3.11 && python3 -m unittest test_runtime.py
	@echo "== node --test runtimes/nodejs20"
	@cd runtimes/nodejs20 && node --test

.PHONY: bench
# The packages with benchmarks; each benchmark measures the platform and its
# bare baseline in the same run (ABBA rounds, median of at least three) and
# records its ratios; benchtable prints them in one table against the budgets
# of ARCHITECTURE.md section 10 and fails on a missed budget, a round with
# errors or a missing figure. SLESS_BENCH_ROUNDS raises the rounds.
BENCH_PACKAGES := services/operator:./internal/driver/ services/gateway:. services/invoker:. services/scheduler:. e2e:.
bench: deps ## run the benchmarks: one table of every ratio against its budget; fails when a budget is missed
	@$(DEPS_ENV); results=$$(mktemp); trap 'rm -f $$results' EXIT; export SLESS_BENCH_RESULTS=$$results; \
	echo "load average at start: $$(cut -d' ' -f1-3 /proc/loadavg), $$(nproc) CPUs"; status=0; \
	for mp in $(BENCH_PACKAGES); do \
		m=$${mp%%:*}; p=$${mp#*:}; echo "== go test -bench $$m/$$p"; \
		(cd $$m && go test -run '^$$' -bench . -benchtime 1x -timeout 30m $$p) || status=1; \
	done; \
	echo; echo "== benchmark ratios (median of the rounds; load = 1-minute load average when taken)"; \
	(cd pkg && go run ./loadgen/benchtable $$results) || status=1; \
	exit $$status

.PHONY: bench-scale
# Not part of make test or make bench: grows one make dev platform to each
# step of SCALE_STEPS tenants (10 functions each, at rest) and prints the
# growth table of docs/scale.md; SCALE_ROWS invocation rows (COPY) time
# the history list and the retention sweep (0 skips them). Then grows a
# private RabbitMQ node to each step of BROKER_STEPS tenant vhosts and
# times its restart at each (empty BROKER_STEPS skips it).
SCALE_STEPS ?= 100,300,1000
SCALE_ROWS ?= 1000000
BROKER_STEPS ?= $(SCALE_STEPS)
bench-scale: deps ## grow a make dev platform to 100, 300, 1000 tenants and print the growth table, then time a broker's restart with as many vhosts (SCALE_STEPS, SCALE_ROWS, BROKER_STEPS)
	@$(DEPS_ENV); echo "load average at start: $$(cut -d' ' -f1-3 /proc/loadavg), $$(nproc) CPUs"; \
	(cd e2e && go test -run '^$$' -bench '^BenchmarkScale$$' -benchtime 1x -timeout 90m . \
		-args -scale.steps=$(SCALE_STEPS) -scale.rows=$(SCALE_ROWS) $(SCALE_ARGS)) || exit 1; \
	if [ -n "$(BROKER_STEPS)" ]; then \
		echo "load average before the broker restarts: $$(cut -d' ' -f1-3 /proc/loadavg)"; \
		cd services/operator && go test -run '^$$' -bench '^BenchmarkBrokerRestart$$' -benchtime 1x -timeout 90m ./internal/brokeradmin \
			-args -broker.vhosts=$(BROKER_STEPS) $(BROKER_ARGS); \
	fi

.PHONY: generate
# Everything is generated into a temporary directory first, and a file of
# the tree is written only when its content changes: a current tree is
# never written, so make verify can run beside compiles of the same files.
generate: ## regenerate deepcopy code, CRD manifests (also into the Helm chart), the OpenAPI document and the Go client
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	(cd pkg && go tool controller-gen object output:object:dir="$$tmp" paths=./apis/sless/v1alpha1/... \
		crd:crdVersions=v1 output:crd:artifacts:config="$$tmp/crds"); \
	: "the gateway's own document, built in-process from its operations, and the typed client generated from it"; \
	(cd services/gateway && go run ./cmd/openapi > "$$tmp/openapi.yaml"); \
	sed "s|^output: .*|output: $$tmp/client.gen.go|" pkg/client/oapi-codegen.yaml > "$$tmp/oapi-codegen.yaml"; \
	(cd pkg/client && go tool oapi-codegen -config "$$tmp/oapi-codegen.yaml" "$$tmp/openapi.yaml"); \
	put() { cmp -s "$$1" "$$2" || cp "$$1" "$$2"; }; \
	put "$$tmp/zz_generated.deepcopy.go" pkg/apis/sless/v1alpha1/zz_generated.deepcopy.go; \
	for f in "$$tmp"/crds/*.yaml; do put "$$f" pkg/apis/sless/crds/$${f##*/}; put "$$f" deploy/helm/sless/files/crds/$${f##*/}; done; \
	put "$$tmp/openapi.yaml" pkg/client/openapi.yaml; \
	put "$$tmp/client.gen.go" pkg/client/client.gen.go

.PHONY: verify
verify: fmt-check imports-check vet staticcheck ## fail when generated code is stale, code is unformatted or unlinted
	@before=$$(cat $(GENERATED) | sha256sum); $(MAKE) --no-print-directory generate; \
	after=$$(cat $(GENERATED) | sha256sum); \
	if [ "$$before" != "$$after" ]; then echo "generated code was stale: 'make generate' rewrote it; commit the result"; exit 1; fi
	@echo "verify: generated code current, gofmt and goimports clean, go vet and staticcheck clean"

.PHONY: fmt-check
fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

.PHONY: imports-check imports
# Imports in three groups: standard library, third party, then sless. The
# tools are pinned by the tool directives in pkg/go.mod (go tool, workspace-wide).
# Generated code is left as its generator writes it (verify regenerates it).
LOCAL := github.com/kube5s/sless
GO_SOURCES = $$(git ls-files '*.go' ':!:**/zz_generated*' ':!:**/*.gen.go')
imports-check:
	@out=$$(go tool goimports -local $(LOCAL) -l $(GO_SOURCES)); if [ -n "$$out" ]; then echo "goimports needed ('make imports'):"; echo "$$out"; exit 1; fi
imports: ## regroup imports: standard library, third party, sless
	@go tool goimports -local $(LOCAL) -w $(GO_SOURCES)

.PHONY: staticcheck
staticcheck: ## staticcheck every module
	@for m in $(LINT_MODULES); do (cd $$m && go tool staticcheck ./...) || exit 1; done

.PHONY: vet lint
vet: ## go vet every module
	@for m in $(LINT_MODULES); do (cd $$m && go vet ./...) || exit 1; done
lint: vet fmt-check imports-check staticcheck ## vet, gofmt, goimports and staticcheck

.PHONY: clean
clean: ## remove build output (not the dependency cache)
	rm -rf bin
