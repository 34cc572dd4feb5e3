#!/usr/bin/env bash
# A real one-node Kubernetes cluster on this machine, every program built
# from its Go module (cached by version under ~/.cache/sless like
# hack/deps.sh's tools) and every system image assembled locally with
# go-containerregistry (no pulls).
#
#   hack/cluster.sh build   only build the cached binaries
#   hack/cluster.sh up      build what is missing, start the cluster, wait Ready
#   hack/cluster.sh env     print the export lines (KUBECONFIG, ...)
#   hack/cluster.sh bridge  make this machine's servers (hack/deps.sh) reachable
#                           from pods on the node's address
#   hack/cluster.sh try     up, bridge, the images, then docs/install.md's
#                           commands: Secrets, values, helm install; prints
#                           the gateway's URL and an admin token
#   hack/cluster.sh guide   print docs/install.md's install commands
#   hack/cluster.sh down    stop everything up started and remove what it made
#                           (processes, mounts, network namespaces, nftables
#                           and iptables rules, kube-router's ipsets, veths,
#                           the bridge)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${SLESS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sless}

KUBE_VERSION=$(awk '/^require k8s.io\/kubernetes/ {print $3}' "$ROOT/hack/tools/kube/go.mod")
ETCD_VERSION=$(awk '/^require go.etcd.io\/etcd\/server\/v3/ {print $3}' "$ROOT/hack/tools/etcd/go.mod")
CONTAINERD_VERSION=v2.4.2
RUNC_VERSION=v1.5.3
CNI_VERSION=v1.10.0
# The NetworkPolicy enforcer: kube-router's policy controller alone
# (iptables + ipset); see docs/contributing.md for why not kube-network-policies.
KUBE_ROUTER_VERSION=v2.1.0

say() { printf 'cluster: %s\n' "$*" >&2; }
die() { printf 'cluster: ERROR: %s\n' "$*" >&2; exit 1; }

# build NAME DIR PKG MODULE_DIR [LDFLAGS]: go build PKG inside the wrapper module
# MODULE_DIR into DIR/NAME, once (as hack/deps.sh does).
build() {
	local name=$1 dir=$2 pkg=$3 moddir=$4 ldflags=${5:-}
	[ -x "$dir/$name" ] && return 0
	mkdir -p "$dir"
	say "building $name into $dir (first time only; this takes minutes)"
	local start=$SECONDS
	(cd "$moddir" && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $ldflags" -o "$dir/.$name.tmp" "$pkg") >&2 ||
		die "building $name failed"
	mv "$dir/.$name.tmp" "$dir/$name"
	say "built $name in $((SECONDS - start))s"
}

# install DIR CGO TAGS PKG@VERSION...: go install module packages at a
# version into DIR, once (DIR/.done marks a complete build).
install() {
	local dir=$1 cgo=$2 tags=$3
	shift 3
	[ -f "$dir/.done" ] && return 0
	mkdir -p "$dir"
	say "building $* into $dir (first time only)"
	local start=$SECONDS
	GOWORK=off GOFLAGS=-mod=mod GOBIN="$dir" CGO_ENABLED=$cgo go install -trimpath -tags "$tags" -ldflags "-s -w" "$@" >&2 ||
		die "building $* failed"
	touch "$dir/.done"
	say "built $(basename "$dir") in $((SECONDS - start))s"
}

# Linked with their version, as hack/deps.sh links kube-apiserver (-r2).
KUBE_LDFLAGS=$(v=${KUBE_VERSION#v}; printf -- '-X k8s.io/component-base/version.gitVersion=%s -X k8s.io/component-base/version.gitMajor=%s -X k8s.io/component-base/version.gitMinor=%s -X k8s.io/component-base/version.gitTreeState=clean' \
	"$KUBE_VERSION" "${v%%.*}" "$(echo "$v" | cut -d. -f2)")
KUBE_BIN=$CACHE/kube-node-$KUBE_VERSION-r2
CONTAINERD_DIR=$CACHE/containerd-$CONTAINERD_VERSION
RUNC_DIR=$CACHE/runc-$RUNC_VERSION
CNI_DIR=$CACHE/cni-plugins-$CNI_VERSION
KUBE_ROUTER_DIR=$CACHE/kube-router-$KUBE_ROUTER_VERSION
# helm installs the chart on the cluster (hack/cluster's TestHelmInstall).
# CoreDNS with only the Corefile's plugins (hack/tools/coredns/main.go): the
# cache key is the version and the plugin list.
COREDNS_VERSION=$(awk '$1 == "require" && $2 == "github.com/coredns/coredns" {print $3}' "$ROOT/hack/tools/coredns/go.mod")
COREDNS_KEY=$COREDNS_VERSION-$(sha256sum "$ROOT/hack/tools/coredns/main.go" | cut -c1-8)
HELM_VERSION=$(awk '$1 == "helm.sh/helm/v3" {print $2}' "$ROOT/hack/tools/helm/go.mod")
HELM=$CACHE/helm-$HELM_VERSION/helm
COREDNS_DIR=$CACHE/coredns-$COREDNS_KEY
APISERVER=$CACHE/kube-apiserver-$KUBE_VERSION-r2/kube-apiserver
ETCD=$CACHE/etcd-$ETCD_VERSION/etcd

build_all() {
	command -v go >/dev/null || die "go not found on PATH"
	mkdir -p "$CACHE"
	exec 8>"$CACHE/.cluster-build.lock"
	flock 8
	# Download in the background what the builds below will need, so that
	# they compile while the network works (hack/deps.sh does the same):
	# go install -n resolves and downloads a module's graph without
	# compiling, go list -deps a wrapper module's.
	local c
	for c in "$CONTAINERD_DIR containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
		"$CNI_DIR containernetworking/plugins/plugins/main/bridge@$CNI_VERSION" \
		"$KUBE_ROUTER_DIR cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION"; do
		[ -f "${c%% *}/.done" ] || GOWORK=off GOFLAGS=-mod=mod go install -n "github.com/${c#* }" >/dev/null 2>&1 8>&- &
	done
	[ -x "$HELM" ] || (cd "$ROOT/hack/tools/helm" && GOWORK=off go list -deps helm.sh/helm/v3/cmd/helm >/dev/null 2>&1) 8>&- &
	[ -x "$COREDNS_DIR/coredns" ] || (cd "$ROOT/hack/tools/coredns" && GOWORK=off go list -deps . >/dev/null 2>&1) 8>&- &
	for c in kubelet kube-controller-manager kube-scheduler kube-proxy; do
		build "$c" "$KUBE_BIN" "k8s.io/kubernetes/cmd/$c" "$ROOT/hack/tools/kube" "$KUBE_LDFLAGS"
	done
	install "$CONTAINERD_DIR" 0 "no_btrfs no_devmapper no_zfs" \
		"github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
		"github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION"
	if [ ! -f "$RUNC_DIR/.done" ] && [ ! -f /usr/include/seccomp.h ]; then
		command -v apt-get >/dev/null || die "runc needs libseccomp's headers: install libseccomp-dev"
		say "installing libseccomp-dev and gcc (runc is built with cgo and seccomp)"
		apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libseccomp-dev gcc pkg-config >&2 ||
			die "apt-get install libseccomp-dev failed"
	fi
	install "$RUNC_DIR" 1 seccomp "github.com/opencontainers/runc@$RUNC_VERSION"
	install "$CNI_DIR" 0 "" \
		"github.com/containernetworking/plugins/plugins/main/bridge@$CNI_VERSION" \
		"github.com/containernetworking/plugins/plugins/main/loopback@$CNI_VERSION" \
		"github.com/containernetworking/plugins/plugins/ipam/host-local@$CNI_VERSION" \
		"github.com/containernetworking/plugins/plugins/meta/portmap@$CNI_VERSION"
	build coredns "$COREDNS_DIR" . "$ROOT/hack/tools/coredns"
	install "$KUBE_ROUTER_DIR" 0 "" "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION"
	build_helm
	wait
	flock -u 8
}

build_helm() { build helm "$(dirname "$HELM")" helm.sh/helm/v3/cmd/helm "$ROOT/hack/tools/helm"; }

# ---------------------------------------------------------------------------
# The cluster. Everything it writes lives in $C (wiped by down); everything it
# changes outside $C is listed in down().

C=${SLESS_CLUSTER_DIR:-${SLESS_STATE_DIR:-$CACHE/state}/cluster}
BASE=${SLESS_CLUSTER_PORT_BASE:-17440}
API_PORT=$BASE              # kube-apiserver, on the node address
ETCD_PORT=$((BASE + 1))     # etcd client (peer: +2), loopback
KUBELET_PORT=$((BASE + 3))  # kubelet API, on the node address
KUBELET_HEALTHZ=$((BASE + 4))
PROXY_HEALTHZ=$((BASE + 5))
PROXY_METRICS=$((BASE + 6))
NODE=sless-node
BRIDGE=sless0
NODE_IP=10.244.0.1 # the bridge's address: the node's InternalIP and the apiserver's
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
DNS_IP=10.96.0.10
SOCK=$C/containerd/containerd.sock
PAUSE_IMAGE=registry.k8s.io/pause:3.10.2
COREDNS_IMAGE=sless.local/coredns:$COREDNS_VERSION
REGISTRY=127.0.0.1:${SLESS_REGISTRY_PORT:-5001}
# The same registry by the node's address, for images that a pod also
# fetches (a build's assemble step); something must forward it there (the
# Helm test does).
NODE_REGISTRY=$NODE_IP:${SLESS_REGISTRY_PORT:-5001}
ADMIN=$C/admin.kubeconfig
PROCS="etcd kube-apiserver containerd kube-controller-manager kube-scheduler kubelet kube-proxy kube-router"

alive() { [ -f "$C/$1.pid" ] && kill -0 "$(cat "$C/$1.pid")" 2>/dev/null; }

# start NAME CMD...: run a program in the background, its log in $C/NAME.log.
start() {
	local name=$1
	shift
	alive "$name" && return 0
	setsid nohup "$@" >"$C/$name.log" 2>&1 </dev/null &
	echo $! >"$C/$name.pid"
}

# wait_for WHAT SECONDS CMD...: poll CMD every 0.2 s; fail with the end of
# the log named in $LOG (if any) and what CMD last printed.
wait_for() {
	local what=$1 secs=$2 i out=""
	shift 2
	for ((i = 0; i < secs * 5; i++)); do
		if out=$("$@" 2>&1); then return 0; fi
		sleep 0.2
	done
	say "$what: not ready within ${secs}s; it last said: $out"
	[ -z "${LOG:-}" ] || { say "the end of $LOG:"; tail -n 30 "$LOG" >&2; }
	die "$what did not become ready"
}

api() { # METHOD PATH [curl args...]: a call to the apiserver as the admin
	local m=$1 p=$2
	shift 2
	curl -fsS --cacert "$C/pki/ca.crt" --cert "$C/pki/admin.crt" --key "$C/pki/admin.key" -X "$m" "https://$NODE_IP:$API_PORT$p" "$@"
}

# apply PATH: server-side apply of the YAML on stdin to the object at PATH.
apply() {
	api PATCH "$1?fieldManager=sless-cluster&force=true" -H 'Content-Type: application/apply-patch+yaml' --data-binary @- >/dev/null ||
		die "applying $1 failed"
}

# cert NAME CN O [SAN]: a key and a certificate signed by the cluster CA.
cert() {
	local name=$1 cn=$2 o=$3 san=${4:-}
	openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$C/pki/$name.key" \
		-subj "/CN=$cn${o:+/O=$o}" -out "$C/pki/$name.csr" 2>/dev/null
	{
		echo "basicConstraints=CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=serverAuth,clientAuth"
		[ -z "$san" ] || echo "subjectAltName=$san"
	} >"$C/pki/$name.ext"
	openssl x509 -req -in "$C/pki/$name.csr" -CA "$C/pki/ca.crt" -CAkey "$C/pki/ca.key" -CAcreateserial \
		-days 365 -extfile "$C/pki/$name.ext" -out "$C/pki/$name.crt" 2>/dev/null
}

kubeconfig() { # NAME: $C/NAME.kubeconfig with the NAME client certificate
	cat >"$C/$1.kubeconfig" <<EOK
apiVersion: v1
kind: Config
clusters:
- name: sless
  cluster:
    server: https://$NODE_IP:$API_PORT
    certificate-authority: $C/pki/ca.crt
users:
- name: $1
  user:
    client-certificate: $C/pki/$1.crt
    client-key: $C/pki/$1.key
contexts:
- name: sless
  context: {cluster: sless, user: $1}
current-context: sless
EOK
}

pki() {
	[ -f "$C/pki/admin.crt" ] && return 0
	mkdir -p "$C/pki"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 365 -subj "/CN=sless-cluster-ca" \
		-keyout "$C/pki/ca.key" -out "$C/pki/ca.crt" 2>/dev/null
	openssl genrsa -out "$C/pki/sa.key" 2048 2>/dev/null
	openssl rsa -in "$C/pki/sa.key" -pubout -out "$C/pki/sa.pub" 2>/dev/null
	cert apiserver kube-apiserver "" "IP:$NODE_IP,IP:10.96.0.1,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
	cert admin sless-admin system:masters
	cert kubelet "system:node:$NODE" system:nodes "IP:$NODE_IP,DNS:$NODE"
	cert kube-controller-manager system:kube-controller-manager ""
	cert kube-scheduler system:kube-scheduler ""
	cert kube-proxy system:kube-proxy ""
	cert kube-router sless:kube-router ""
	local k
	for k in admin kubelet kube-controller-manager kube-scheduler kube-proxy kube-router; do kubeconfig "$k"; done
}

network() {
	[ -f "$C/ip_forward.before" ] || cat /proc/sys/net/ipv4/ip_forward >"$C/ip_forward.before"
	[ -f "$C/nft-tables.before" ] || nft list tables >"$C/nft-tables.before"
	if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
		ip link add "$BRIDGE" type bridge
		ip addr add "$NODE_IP/24" dev "$BRIDGE"
		ip link set "$BRIDGE" up
	fi
	mkdir -p "$C/cni/net.d" "$C/cni/ipam"
	cat >"$C/cni/net.d/10-sless.conflist" <<EON
{
  "cniVersion": "1.0.0",
  "name": "sless",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$C/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP", "rangeStart": "10.244.0.10"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "backend": "nftables", "capabilities": {"portMappings": true}}
  ]
}
EON
}

containerd_up() {
	local r
	for r in "$REGISTRY" "$NODE_REGISTRY"; do
		mkdir -p "$C/containerd/certs.d/$r"
		cat >"$C/containerd/certs.d/$r/hosts.toml" <<EOH
server = "http://$r"
[host."http://$r"]
  capabilities = ["pull", "resolve"]
EOH
	done
	cat >"$C/containerd/config.toml" <<EOT
version = 3
root = "$C/containerd/root"
state = "$C/containerd/state"
disabled_plugins = ["io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "$RUNC_DIR/runc"
        Root = "$C/runc"
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["$CNI_DIR"]
    conf_dir = "$C/cni/net.d"
[plugins."io.containerd.cri.v1.images"]
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$PAUSE_IMAGE"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "$C/containerd/certs.d"
[plugins."io.containerd.nri.v1.nri"]
  disable = true
[plugins."io.containerd.internal.v1.opt"]
  path = "$C/containerd/opt"
EOT
	[ -d /run/containerd ] || touch "$C/run-containerd.ours"
	PATH=$CONTAINERD_DIR:$RUNC_DIR:$PATH start containerd "$CONTAINERD_DIR/containerd" --config "$C/containerd/config.toml"
	LOG=$C/containerd.log wait_for containerd 30 "$CONTAINERD_DIR/ctr" --address "$SOCK" version
}

# images: assemble the system images once per version of what goes into
# them (cached beside the binaries), and import them into containerd.
images() {
	local key dir
	key=$(cat "$ROOT/hack/cluster/pause/main.go" "$ROOT/hack/cluster/image/main.go" "$ROOT/hack/cluster/go.sum" | sha256sum | cut -c1-12)
	dir=$CACHE/cluster-images-$COREDNS_KEY-$key
	if [ ! -f "$dir/.done" ]; then
		mkdir -p "$dir/bin"
		(cd "$ROOT/hack/cluster" && GOWORK=off CGO_ENABLED=0 go build -trimpath -o "$dir/bin/pause" ./pause &&
			GOWORK=off CGO_ENABLED=0 go build -trimpath -o "$dir/bin/image" ./image) >&2 || die "building the image helpers failed"
		"$dir/bin/image" -ref "$PAUSE_IMAGE" -tar "$dir/pause.tar" -entrypoint /pause "/pause=$dir/bin/pause"
		"$dir/bin/image" -ref "$COREDNS_IMAGE" -tar "$dir/coredns.tar" -entrypoint /coredns "/coredns=$COREDNS_DIR/coredns"
		touch "$dir/.done"
	fi
	local t
	for t in pause coredns; do
		"$CONTAINERD_DIR/ctr" --address "$SOCK" -n k8s.io images import --local "$dir/$t.tar" >>"$C/ctr.log" 2>&1 ||
			die "importing the $t image into containerd failed"
	done
}

control_plane_up() {
	mkdir -p "$C/etcd"
	start etcd "$ETCD" --name sless-cluster --data-dir "$C/etcd/data" \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$((BASE + 2))" --initial-advertise-peer-urls "http://127.0.0.1:$((BASE + 2))" \
		--initial-cluster "sless-cluster=http://127.0.0.1:$((BASE + 2))" --listen-metrics-urls "" \
		--unsafe-no-fsync --quota-backend-bytes 2147483648
	LOG=$C/etcd.log wait_for etcd 30 curl -fsS "http://127.0.0.1:$ETCD_PORT/health"
	start kube-apiserver "$APISERVER" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
		--bind-address "$NODE_IP" --advertise-address "$NODE_IP" --secure-port "$API_PORT" \
		--cert-dir "$C/pki" --tls-cert-file "$C/pki/apiserver.crt" --tls-private-key-file "$C/pki/apiserver.key" \
		--client-ca-file "$C/pki/ca.crt" \
		--kubelet-client-certificate "$C/pki/apiserver-kubelet-client.crt" --kubelet-client-key "$C/pki/apiserver-kubelet-client.key" \
		--service-account-issuer https://kubernetes.default.svc.cluster.local \
		--service-account-key-file "$C/pki/sa.pub" --service-account-signing-key-file "$C/pki/sa.key" \
		--service-cluster-ip-range "$SERVICE_CIDR" --authorization-mode Node,RBAC \
		--enable-admission-plugins NodeRestriction --allow-privileged=true --profiling=false \
		--kubelet-preferred-address-types InternalIP
	LOG=$C/kube-apiserver.log wait_for kube-apiserver 90 api GET /readyz
	start kube-controller-manager "$KUBE_BIN/kube-controller-manager" --kubeconfig "$C/kube-controller-manager.kubeconfig" \
		--secure-port 0 --leader-elect=false --use-service-account-credentials \
		--service-account-private-key-file "$C/pki/sa.key" --root-ca-file "$C/pki/ca.crt" \
		--service-cluster-ip-range "$SERVICE_CIDR" --profiling=false \
		--resource-quota-sync-period 15s
	start kube-scheduler "$KUBE_BIN/kube-scheduler" --kubeconfig "$C/kube-scheduler.kubeconfig" \
		--secure-port 0 --leader-elect=false --profiling=false
}

node_up() {
	mkdir -p "$C/kubelet" "$C/pod-logs"
	cat >"$C/kubelet.yaml" <<EOK
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$SOCK
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $C/pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $C/pki/kubelet.crt
tlsPrivateKeyFile: $C/pki/kubelet.key
clusterDomain: cluster.local
clusterDNS: [$DNS_IP]
podLogsDir: $C/pod-logs
failSwapOn: false
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
serializeImagePulls: false
EOK
	start kubelet "$KUBE_BIN/kubelet" --config "$C/kubelet.yaml" --kubeconfig "$C/kubelet.kubeconfig" \
		--root-dir "$C/kubelet" --hostname-override "$NODE" --node-ip "$NODE_IP"
	cat >"$C/kube-proxy.yaml" <<EOP
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clusterCIDR: $POD_CIDR
hostnameOverride: $NODE
bindAddress: 127.0.0.1
nodePortAddresses: [primary]
healthzBindAddress: 127.0.0.1:$PROXY_HEALTHZ
metricsBindAddress: 127.0.0.1:$PROXY_METRICS
clientConnection: {kubeconfig: $C/kube-proxy.kubeconfig}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOP
	start kube-proxy "$KUBE_BIN/kube-proxy" --config "$C/kube-proxy.yaml"
	LOG=$C/kubelet.log wait_for "the node $NODE" 120 node_ready
}

node_ready() {
	api GET "/api/v1/nodes/$NODE" | python3 -c '
import json, sys
n = json.load(sys.stdin)
c = {x["type"]: x for x in n["status"].get("conditions", [])}
r = c.get("Ready", {})
print(r.get("status"), r.get("reason"), r.get("message"))
sys.exit(r.get("status") != "True")'
}

addons() {
	apply /api/v1/namespaces/kube-system/serviceaccounts/coredns <<EOY
apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
EOY
	apply /apis/rbac.authorization.k8s.io/v1/clusterroles/system:coredns <<EOY
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
EOY
	apply /apis/rbac.authorization.k8s.io/v1/clusterrolebindings/system:coredns <<EOY
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
EOY
	apply /api/v1/namespaces/kube-system/configmaps/coredns <<EOY
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:53 {
        errors
        health :8080
        ready :8181
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            pods insecure
            fallthrough in-addr.arpa ip6.arpa
        }
        forward . /etc/resolv.conf
        cache 30
    }
EOY
	apply /apis/apps/v1/namespaces/kube-system/deployments/coredns <<EOY
apiVersion: apps/v1
kind: Deployment
metadata: {name: coredns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      serviceAccountName: coredns
      priorityClassName: system-cluster-critical
      dnsPolicy: Default
      tolerations: [{operator: Exists}]
      containers:
      - name: coredns
        image: $COREDNS_IMAGE
        imagePullPolicy: Never
        args: [-conf, /etc/coredns/Corefile]
        ports:
        - {name: dns, containerPort: 53, protocol: UDP}
        - {name: dns-tcp, containerPort: 53, protocol: TCP}
        readinessProbe:
          httpGet: {path: /ready, port: 8181}
          periodSeconds: 2
        livenessProbe:
          httpGet: {path: /health, port: 8080}
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {add: [NET_BIND_SERVICE], drop: [ALL]}
        volumeMounts: [{name: config, mountPath: /etc/coredns, readOnly: true}]
      volumes: [{name: config, configMap: {name: coredns}}]
EOY
	apply /api/v1/namespaces/kube-system/services/kube-dns <<EOY
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: $DNS_IP
  selector: {k8s-app: kube-dns}
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
EOY
	# kube-router's policy controller runs on the node as a host process with
	# its own client certificate (user sless:kube-router): it reads what its
	# informers watch and writes nothing to the API.
	apply /apis/rbac.authorization.k8s.io/v1/clusterroles/sless:kube-router <<EOY
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "sless:kube-router"}
rules:
- apiGroups: [""]
  resources: [pods, namespaces, nodes, services, endpoints]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch]
EOY
	apply /apis/rbac.authorization.k8s.io/v1/clusterrolebindings/sless:kube-router <<EOY
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "sless:kube-router"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "sless:kube-router"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "sless:kube-router"}]
EOY
}

# ready_pods NS SELECTOR: every pod matching is Ready (and there is one).
ready_pods() {
	api GET "/api/v1/namespaces/$1/pods?labelSelector=$2" | python3 -c '
import json, sys
items = json.load(sys.stdin)["items"]
def ready(p):
    return any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
print([(p["metadata"]["name"], p["status"].get("phase"), [cs.get("state") for cs in p["status"].get("containerStatuses", [])]) for p in items])
sys.exit(not items or not all(ready(p) for p in items))'
}

coredns_ready() { LOG=$C/kubelet.log wait_for CoreDNS 120 ready_pods kube-system k8s-app%3Dkube-dns; }

# netpol_up: kube-router with only its firewall (no BGP routing, no service
# proxy: kube-proxy does that), health and metrics servers off (they would
# listen on every address). Pods on the bridge reach each other bridged, so
# its FORWARD rules see them only with net.bridge.bridge-nf-call-iptables=1
# (what kubeadm requires of a node); down puts the value back.
netpol_up() {
	[ -f "$C/bridge-nf-call-iptables.before" ] || cat /proc/sys/net/bridge/bridge-nf-call-iptables >"$C/bridge-nf-call-iptables.before"
	echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables
	start kube-router "$KUBE_ROUTER_DIR/kube-router" --kubeconfig "$C/kube-router.kubeconfig" \
		--run-firewall=true --run-router=false --run-service-proxy=false \
		--hostname-override "$NODE" --service-cluster-ip-range "$SERVICE_CIDR" \
		--health-port 0 --metrics-port 0 --v 1
}

up() {
	local t0=$SECONDS
	[ "$(id -u)" = 0 ] || die "the node runs as root (containerd, the kubelet, kube-proxy)"
	local missing=() tool
	for tool in nft:nftables iptables:iptables ipset:ipset openssl:openssl curl:curl; do
		command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		command -v apt-get >/dev/null || die "install ${missing[*]}"
		say "installing ${missing[*]} (Debian packages)"
		apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2 || die "apt-get install ${missing[*]} failed"
	fi
	command -v python3 >/dev/null || die "python3 not found on PATH"
	build_all
	[ -x "$APISERVER" ] && [ -x "$ETCD" ] || bash "$ROOT/hack/deps.sh" build
	mkdir -p "$C"
	local step
	for step in pki network control_plane_up containerd_up images node_up addons netpol_up coredns_ready netpol_check; do
		$step
		printf '%s %s\n' "$((SECONDS - t0))" "$step" >>"$C/up.timing"
	done
	say "up in $((SECONDS - t0))s (seconds at the end of each step: $(tr '\n' ' ' <"$C/up.timing")); eval \"\$(hack/cluster.sh env)\" gives KUBECONFIG=$ADMIN"
}

# netpol_check: kube-router logs "sync iptables took" after each complete
# sync of its iptables chains and ipsets; "Aborting sync" when one failed.
# Until the first sync is complete nothing is enforced: say so (its own
# words) in $C/netpol-not-enforced rather than pretend.
netpol_check() {
	local i
	for ((i = 0; i < 300; i++)); do
		if grep -q 'sync iptables took' "$C/kube-router.log" 2>/dev/null &&
			iptables -S KUBE-ROUTER-FORWARD >/dev/null 2>&1; then
			rm -f "$C/netpol-not-enforced"
			return 0
		fi
		alive kube-router || break
		grep -q 'Aborting sync' "$C/kube-router.log" 2>/dev/null && break
		sleep 0.2
	done
	{
		echo "kube-router's policy controller has not synced its rules: NetworkPolicy is NOT enforced on this node."
		alive kube-router || echo "kube-router is not running."
		grep -E 'Aborting sync|^E|^F' "$C/kube-router.log" 2>/dev/null | tail -n 5
	} >"$C/netpol-not-enforced"
	say "WARNING: $(cat "$C/netpol-not-enforced")"
}

print_env() {
	cat <<EOT
export KUBECONFIG='$ADMIN'
export PATH="$(dirname "$HELM"):\$PATH"
export SLESS_CLUSTER_DIR='$C'
export SLESS_CLUSTER_SCRIPT='$ROOT/hack/cluster.sh'
export SLESS_TEST_REGISTRY='$REGISTRY'
export SLESS_CLUSTER_API_PORT='$API_PORT'
export SLESS_NODE_REGISTRY='$NODE_REGISTRY'
EOT
}

stop() { # NAME: SIGTERM, then SIGKILL after 10 s
	local pid i
	[ -f "$C/$1.pid" ] || return 0
	pid=$(cat "$C/$1.pid")
	if kill "$pid" 2>/dev/null; then
		for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$C/$1.pid"
}

# kubepods_kill: SIGKILL every process in the kubelet's pod cgroups (the
# containers, which runc left in them), in every v1 hierarchy.
kubepods_kill() {
	local i pids
	for ((i = 0; i < 50; i++)); do
		pids=$(cat /sys/fs/cgroup/*/kubepods/cgroup.procs /sys/fs/cgroup/*/kubepods/*/cgroup.procs \
			/sys/fs/cgroup/*/kubepods/*/*/cgroup.procs /sys/fs/cgroup/*/kubepods/*/*/*/cgroup.procs 2>/dev/null | sort -u || true)
		[ -n "$pids" ] || return 0
		# shellcheck disable=SC2086
		kill -9 $pids 2>/dev/null || true
		sleep 0.1
	done
	say "processes left in the kubepods cgroups: $pids"
}

# iptables_clean: the kubelet's iptables chains (KUBE-FIREWALL,
# KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT) and the rules that jump to them;
# a table that did not exist before up (iptables-nft makes them as nftables
# tables) is deleted whole once it holds nothing else.
iptables_clean() {
	local fam t cmd rule chain
	for fam in ip ip6; do
		cmd=iptables
		[ $fam = ip ] || cmd=ip6tables
		for t in filter nat mangle; do
			nft list table $fam $t >/dev/null 2>&1 || continue
			while read -r rule; do
				# shellcheck disable=SC2086
				eval "$cmd -t $t -D ${rule#-A }" 2>/dev/null || true
			done < <($cmd-save -t $t 2>/dev/null | grep -E '^-A [A-Z]+ .*-j KUBE-' || true)
			for chain in $($cmd-save -t $t 2>/dev/null | sed -n 's/^:\(KUBE-[^ ]*\) .*/\1/p'); do
				$cmd -t $t -F "$chain" 2>/dev/null || true
			done
			for chain in $($cmd-save -t $t 2>/dev/null | sed -n 's/^:\(KUBE-[^ ]*\) .*/\1/p'); do
				$cmd -t $t -X "$chain" 2>/dev/null || true
			done
			if ! grep -qx "table $fam $t" "$C/nft-tables.before" 2>/dev/null && ! $cmd-save -t $t 2>/dev/null | grep -q '^-A '; then
				nft delete table $fam $t 2>/dev/null || true
			fi
		done
	done
}

down() {
	local p pid m
	[ -d "$C" ] || return 0
	for p in bridge kube-router kubelet kube-proxy kube-scheduler kube-controller-manager; do stop "$p"; done
	kubepods_kill
	stop containerd
	# The shims of our containerd (their command lines name its socket).
	for pid in $(pgrep -f -- "-address $SOCK" || true); do kill -9 "$pid" 2>/dev/null || true; done
	for p in kube-apiserver etcd; do stop "$p"; done
	# Mounts under $C (pod volumes, rootfs overlays, network namespaces), deepest first.
	for m in $(awk -v c="$C/" 'index($5, c) == 1 {print $5}' /proc/self/mountinfo | sort -r); do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || say "could not unmount $m"
	done
	# cgroups the kubelet made: /kubepods in each hierarchy, leaves first.
	for m in /sys/fs/cgroup/*/kubepods; do
		[ -d "$m" ] || continue
		find "$m" -depth -type d -exec rmdir {} + 2>/dev/null || say "could not remove the cgroup $m"
	done
	iptables_clean
	nft delete table ip kube-proxy 2>/dev/null || true
	nft delete table ip6 kube-proxy 2>/dev/null || true
	nft delete table inet kube-network-policies 2>/dev/null || true # made by earlier versions of this script
	# kube-router's ipsets (KUBE-SRC-*, KUBE-DST-*, kube-router-*), once
	# iptables_clean removed the rules that use them.
	if command -v ipset >/dev/null; then
		for m in $(ipset list -n 2>/dev/null | grep -E '^(KUBE-|kube-router-|inet6:KUBE-|inet6:kube-router-)' || true); do
			ipset destroy "$m" 2>/dev/null || say "could not destroy the ipset $m"
		done
	fi
	nft delete table ip cni_hostport 2>/dev/null || true
	nft delete table ip6 cni_hostport 2>/dev/null || true
	ip link del "$BRIDGE" 2>/dev/null || true
	if [ -f "$C/ip_forward.before" ]; then cat "$C/ip_forward.before" >/proc/sys/net/ipv4/ip_forward; fi
	if [ -f "$C/bridge-nf-call-iptables.before" ]; then cat "$C/bridge-nf-call-iptables.before" >/proc/sys/net/bridge/bridge-nf-call-iptables; fi
	find /var/log/containers -maxdepth 1 -type l -lname "$C/*" -delete 2>/dev/null || true
	if [ -f "$C/run-containerd.ours" ]; then rm -rf /run/containerd; fi
	rm -rf "$C"
}

# ---------------------------------------------------------------------------
# Trying the platform on the node: this machine's servers, bridged.

# deps_env: hack/deps.sh's export lines (the servers' addresses), unless
# the caller has them already.
deps_env() {
	[ -n "${SLESS_TEST_POSTGRES_URL:-}" ] || eval "$(bash "$ROOT/hack/deps.sh" env)"
	[ -n "${SLESS_TEST_POSTGRES_URL:-}" ] || die "hack/deps.sh env printed no servers; run make deps"
}

hostport() { # URL: its host:port
	local h=${1#*://}
	h=${h##*@}
	echo "${h%%/*}"
}

on_node() { echo "${1/127.0.0.1:/$NODE_IP:}"; } # URL or host:port by the node's address

# bridge: PostgreSQL, RabbitMQ (AMQP and management), MinIO, the registry
# and an OTLP collector (4318) listen on 127.0.0.1; pods reach them on the
# node's address at the same ports through hack/cluster/bridge, which runs
# until down.
bridge() {
	deps_env
	alive bridge && return 0
	local dir=$CACHE/cluster-bridge-$(sha256sum "$ROOT/hack/cluster/bridge/main.go" | cut -c1-12) hp pairs=()
	if [ ! -x "$dir/bridge" ]; then
		mkdir -p "$dir"
		(cd "$ROOT/hack/cluster" && GOWORK=off CGO_ENABLED=0 go build -trimpath -o "$dir/bridge" ./bridge) >&2 || die "building the bridge failed"
	fi
	for hp in "$(hostport "$SLESS_TEST_POSTGRES_URL")" "$(hostport "$SLESS_TEST_RABBITMQ_URL")" \
		"$(hostport "$SLESS_TEST_RABBITMQ_MANAGEMENT_URL")" "$SLESS_TEST_S3_ENDPOINT" "$REGISTRY" 127.0.0.1:4318; do
		pairs+=("$(on_node "$hp")=$hp")
	done
	start bridge "$dir/bridge" "${pairs[@]}"
	LOG=$C/bridge.log wait_for "the bridge" 10 grep -q "127.0.0.1:4318" "$C/bridge.log"
	say "bridged to $NODE_IP: ${pairs[*]}"
}

# guide: the commands of docs/install.md's install-test blocks, in order.
guide() { awk '/^```sh install-test$/ {f = 1; next} /^```/ {f = 0} f' "$ROOT/docs/install.md"; }

GATEWAY_NODE_PORT=30080

# try_values FILE: the chart's values for this node (every address and port
# a pod uses is the bridge's, and each is in the egress rules).
try_values() {
	local pg amqp mgmt s3 api=$API_PORT
	pg=$(hostport "$SLESS_TEST_POSTGRES_URL")
	amqp=$(hostport "$SLESS_TEST_RABBITMQ_URL")
	mgmt=$(hostport "$SLESS_TEST_RABBITMQ_MANAGEMENT_URL")
	s3=$SLESS_TEST_S3_ENDPOINT
	local one="{replicas: 1, podDisruptionBudget: {minAvailable: 0}}"
	cat >"$1" <<EOV
# Written by hack/cluster.sh try for the one-node cluster.
image:
  repository: $IMAGE_REPOSITORY
  digests: {gateway: $(digest gateway), builder: $(digest builder), operator: $(digest operator), invoker: $(digest invoker), scheduler: $(digest scheduler)}
publicURL: http://$NODE_IP:$GATEWAY_NODE_PORT
rabbitmq:
  managementURL: $(on_node "$SLESS_TEST_RABBITMQ_MANAGEMENT_URL")
  managementUserKey: user
  managementPasswordKey: password
s3: {endpoint: $(on_node "$s3"), bucket: $S3_BUCKET}
registry: {url: $NODE_REGISTRY/functions, insecure: true}
build:
  namespace: sless-builds
  createNamespace: false
  baseImages: {python311: $(on_node "$BASE_PYTHON"), nodejs20: $(on_node "$BASE_NODE")}
  cpu: 500m
  memory: 1Gi
otel: {endpoint: "http://$NODE_IP:4318"}
egress: {allowCIDRs: [$NODE_IP/32]} # a callback receiver on the node
gateway: {replicas: 1, podDisruptionBudget: {minAvailable: 0}, service: {type: NodePort, nodePort: $GATEWAY_NODE_PORT}}
builder: $one
operator: $one
invoker: $one
scheduler: $one
networkPolicy:
  # The API server on the node's address at its own port; the servers at
  # their ports on the bridge.
  platformEgress:
    - {cidrs: [0.0.0.0/0], ports: [443, 6443, $api]}
    # The registry too: the operator deletes function images there.
    - {cidrs: [10.0.0.0/8], ports: [${pg##*:}, ${amqp##*:}, ${mgmt##*:}, ${s3##*:}, 4318, ${REGISTRY##*:}]}
  buildEgress:
    - {cidrs: [10.0.0.0/8], ports: [${s3##*:}, ${REGISTRY##*:}]}
EOV
}

digest() { local r=${IMAGES[$1]:-}; [ -n "$r" ] || die "hack/images.sh printed no image of $1"; echo "${r##*@}"; }

try() {
	[ "$(id -u)" = 0 ] || die "the node runs as root (containerd, the kubelet, kube-proxy)"
	deps_env
	command -v kubectl >/dev/null || die "kubectl not found on PATH (docs/install.md's commands use it)"
	bash "$ROOT/hack/deps.sh" registry up >&2
	declare -gA IMAGES=()
	local k v out
	out=$(cd "$ROOT" && bash hack/images.sh) || die "hack/images.sh failed"
	while read -r k v; do IMAGES[$k]=$v; done <<<"$out"
	out=$(cd "$ROOT" && bash hack/runtime-bases.sh push) || die "hack/runtime-bases.sh push failed"
	while read -r k v; do
		case $k in python3.11) BASE_PYTHON=$v ;; nodejs20) BASE_NODE=$v ;; esac
	done <<<"$out"
	[ -n "${BASE_PYTHON:-}" ] && [ -n "${BASE_NODE:-}" ] || die "hack/runtime-bases.sh printed no runtime bases"
	IMAGE_REPOSITORY=${IMAGES[gateway]%/gateway@*}
	up
	bridge
	# A database, a vhost and a bucket of the install's own, unless given.
	local pg=${TRY_POSTGRES_URL:-} amqp=${TRY_RABBITMQ_URL:-}
	if [ -z "$pg" ]; then
		command -v psql >/dev/null || die "psql not found on PATH: set TRY_POSTGRES_URL to an existing database"
		psql "$SLESS_TEST_POSTGRES_URL" -tAc "SELECT 1 FROM pg_database WHERE datname = 'sless'" | grep -q 1 ||
			psql "$SLESS_TEST_POSTGRES_URL" -qc 'CREATE DATABASE sless' || die "creating the database sless failed"
		pg=${SLESS_TEST_POSTGRES_URL/\/postgres\?/\/sless?}
	fi
	local mgmt_user mgmt_password creds
	creds=${SLESS_TEST_RABBITMQ_URL#amqp://}
	creds=${creds%%@*}
	mgmt_user=${creds%%:*} mgmt_password=${creds#*:}
	if [ -z "$amqp" ]; then
		curl -fsS -u "$mgmt_user:$mgmt_password" -X PUT "$SLESS_TEST_RABBITMQ_MANAGEMENT_URL/api/vhosts/sless" >/dev/null &&
			curl -fsS -u "$mgmt_user:$mgmt_password" -X PUT -H 'Content-Type: application/json' \
				-d '{"configure":".*","write":".*","read":".*"}' "$SLESS_TEST_RABBITMQ_MANAGEMENT_URL/api/permissions/sless/$mgmt_user" >/dev/null ||
			die "creating the RabbitMQ vhost sless failed"
		amqp=${SLESS_TEST_RABBITMQ_URL%/}/sless
	fi
	S3_BUCKET=${TRY_S3_BUCKET:-sless} # the services create it when it is missing
	mkdir -p "$C/try"
	try_values "$C/try/values.yaml"
	# The variables docs/install.md's commands read, by the node's address.
	export KUBECONFIG=$ADMIN PATH="$(dirname "$HELM"):$PATH" VALUES=$C/try/values.yaml
	export ADMIN_TOKEN=${ADMIN_TOKEN:-$(openssl rand -hex 24)}
	export POSTGRES_URL RABBITMQ_URL RABBITMQ_ADMIN_USER=$mgmt_user RABBITMQ_ADMIN_PASSWORD=$mgmt_password
	POSTGRES_URL=$(on_node "$pg") RABBITMQ_URL=$(on_node "$amqp")
	export S3_ACCESS_KEY=$SLESS_TEST_S3_ACCESS_KEY S3_SECRET_KEY=$SLESS_TEST_S3_SECRET_KEY
	# The registry has no auth: the Secret still names it, with any user.
	export REGISTRY=$NODE_REGISTRY REGISTRY_USER=unused REGISTRY_PASSWORD=unused
	local script
	script=$(guide)
	[ -n "$script" ] || die "docs/install.md has no install-test blocks"
	say "running docs/install.md's install commands (values: $VALUES)"
	(cd "$ROOT" && bash -euo pipefail -c "$script") >&2 || die "docs/install.md's install commands failed"
	say "installed; the gateway answers on http://$NODE_IP:$GATEWAY_NODE_PORT (the chart's NOTES above say what next)"
	cat <<EOT
export KUBECONFIG='$ADMIN'
export GW='http://$NODE_IP:$GATEWAY_NODE_PORT'
export ADMIN='$ADMIN_TOKEN'
EOT
}

case "${1:-}" in
build) build_all ;;
up) up ;;
env) print_env ;;
helm) build_helm && echo "$HELM" ;;
bridge) bridge ;;
guide) guide ;;
try) try ;;
down) down ;;
*) die "usage: hack/cluster.sh build|up|down|env|helm|bridge|guide|try" ;;
esac
