#!/usr/bin/env bash
# Builds (once, cached by version) and starts the real servers that the tests
# and `make dev` use: PostgreSQL, RabbitMQ, MinIO, etcd and kube-apiserver,
# the CNCF Distribution registry (images), and builds Jaeger, which make dev
# starts.
#
#   hack/deps.sh up      build what is missing and start what is not running
#   hack/deps.sh up-core as up, without building Jaeger and OpenTofu
#   hack/deps.sh env     print the export lines that point tests at them
#   hack/deps.sh build   only build the cached binaries
#   hack/deps.sh build-late   only build Jaeger and OpenTofu
#   hack/deps.sh down    stop the servers this script started (MinIO, and
#                        PostgreSQL/RabbitMQ only if it started them)
#   hack/deps.sh postgres stop|start   for the database outage tests
#   hack/deps.sh postgres up | rabbitmq up   only that server (the fallback test)
#   hack/deps.sh rabbitmq stop   stop the private node of SLESS_RABBITMQ_PORT
#                        (the broker restart benchmark; never the machine's)
#   hack/deps.sh registry up   build and start only the registry
#   hack/deps.sh chromium   install Debian's chromium when missing (the
#                        console's browser test; up and up-core do it too)
#   hack/deps.sh tofu    build only OpenTofu (the Terraform provider's
#                        acceptance tests run it) and print its path
#
# Servers already listening on their ports are used as they are; when none
# answers, a private one is installed (Debian packages) and started.
# SLESS_PG_PORT and SLESS_RABBITMQ_PORT move them off 5432 and 5672, and
# SLESS_STATE_DIR moves their state, so that the fallback can be tested
# next to the machine's own servers; SLESS_RABBITMQ_MANAGEMENT_PORT moves
# the management API off 15672 and gives a private RabbitMQ node the
# management plugin (it has none otherwise), and
# SLESS_RABBITMQ_START_TIMEOUT (seconds, 120) bounds its start. Every step is
# idempotent and quiet when there is nothing to do.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${SLESS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sless}
STATE=${SLESS_STATE_DIR:-$CACHE/state}

KUBE_VERSION=$(awk '/^require k8s.io\/kubernetes/ {print $3}' "$ROOT/hack/tools/kube/go.mod")
ETCD_VERSION=$(awk '/^require go.etcd.io\/etcd\/server\/v3/ {print $3}' "$ROOT/hack/tools/etcd/go.mod")
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c # MinIO has no semver tags; a pinned pseudo-version.
JAEGER_VERSION=$(awk '$1 == "github.com/jaegertracing/jaeger" {print $2}' "$ROOT/hack/tools/jaeger/go.mod")
REGISTRY_VERSION=$(awk '$1 == "github.com/distribution/distribution/v3" {print $2}' "$ROOT/hack/tools/registry/go.mod")
TOFU_VERSION=$(awk '/^require github.com\/opentofu\/opentofu/ {print $3}' "$ROOT/hack/tools/tofu/go.mod")

PG_PORT=${SLESS_PG_PORT:-5432}
RABBIT_PORT=${SLESS_RABBITMQ_PORT:-5672}
RABBIT_MGMT_PORT=${SLESS_RABBITMQ_MANAGEMENT_PORT:-15672}
# The management API listens on loopback only, whoever enables the plugin.
RABBIT_MGMT_LISTENER="[{ip,\"127.0.0.1\"},{port,$RABBIT_MGMT_PORT}]"
MINIO_PORT=${SLESS_MINIO_PORT:-9100}
REGISTRY_PORT=${SLESS_REGISTRY_PORT:-5001}

# The Kubernetes commands are linked with their version (a module build
# otherwise reports v0.0.0-master, which Helm's kubeVersion check and
# clients refuse); -r2 is the cache key of that build.
KUBE_LDFLAGS=$(v=${KUBE_VERSION#v}; printf -- '-X k8s.io/component-base/version.gitVersion=%s -X k8s.io/component-base/version.gitMajor=%s -X k8s.io/component-base/version.gitMinor=%s -X k8s.io/component-base/version.gitTreeState=clean' \
	"$KUBE_VERSION" "${v%%.*}" "$(echo "$v" | cut -d. -f2)")
KUBE_DIR=$CACHE/kube-apiserver-$KUBE_VERSION-r2
ETCD_DIR=$CACHE/etcd-$ETCD_VERSION
MINIO_DIR=$CACHE/minio-$MINIO_VERSION
ASSETS=$CACHE/envtest-$KUBE_VERSION-etcd-$ETCD_VERSION
JAEGER_DIR=$CACHE/jaeger-$JAEGER_VERSION
REGISTRY_DIR=$CACHE/registry-$REGISTRY_VERSION
TOFU_DIR=$CACHE/opentofu-$TOFU_VERSION

say() { printf 'deps: %s\n' "$*" >&2; }
die() { printf 'deps: ERROR: %s\n' "$*" >&2; exit 1; }

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() { # port seconds what [how-to-fail, default die]
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		listening "$1" && return 0
		sleep 0.1
	done
	"${4:-die}" "$3 did not start listening on 127.0.0.1:$1 within $2s"
}

apt_install() {
	command -v apt-get >/dev/null || die "apt-get not found: install $* by hand"
	say "installing $* from Debian packages"
	if [ ! -f "$STATE/.apt-updated" ]; then
		apt-get update -qq >&2 || die "apt-get update failed"
		mkdir -p "$STATE" && touch "$STATE/.apt-updated"
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=300 "$@" >&2 || die "apt-get install $* failed"
}

# chromium_install: Debian's Chromium, which the web console's browser
# test drives (services/gateway, chromedp); installed only when missing.
chromium_install() {
	command -v chromium >/dev/null && return
	apt_install chromium
}

# build NAME DIR PKG MODULE_DIR [LDFLAGS]: go build PKG inside MODULE_DIR into
# DIR/NAME, once, with LDFLAGS added to the linker's flags.
build() {
	local name=$1 dir=$2 pkg=$3 moddir=$4 ldflags=${5:-}
	[ -x "$dir/$name" ] && return 0
	command -v go >/dev/null || die "go not found on PATH"
	mkdir -p "$dir"
	say "building $name into $dir (first time only; this takes minutes)"
	local start=$SECONDS
	(cd "$moddir" && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $ldflags" -o "$dir/.$name.tmp" "$pkg") >&2 ||
		die "building $name failed"
	mv "$dir/.$name.tmp" "$dir/$name"
	say "built $name in $((SECONDS - start))s"
}

# prefetch NAME DIR PKG MODULE_DIR ...: download, in the background, the
# modules that each missing build will need (go list -deps fetches exactly
# those), so that the sequential builds below compile while the network
# works: a cold build spends minutes of its time waiting on downloads.
# Quadruples: the arguments of build; finish with wait. The downloads do
# not hold the build lock (9>&-): a build that fails leaves no process
# holding it for the next run.
prefetch() {
	while [ $# -ge 4 ]; do
		[ -x "$2/$1" ] || (cd "$4" && GOWORK=off go list -deps "$3" >/dev/null 2>&1) 9>&- &
		shift 4
	done
}

# build_core builds what every module's tests need (the API server and
# etcd of envtest, the registry, MinIO); build_late what only the
# platform-wide tests need (Jaeger for e2e and the cluster test, OpenTofu
# for the provider's), so that hack/test.sh can build those beside the
# first module tests. The downloads of both start at once.
build_core() {
	mkdir -p "$CACHE"
	exec 9>"$CACHE/.build.lock"
	flock 9
	prefetch etcd "$ETCD_DIR" ./cmd/etcd "$ROOT/hack/tools/etcd" \
		jaeger "$JAEGER_DIR" github.com/jaegertracing/jaeger/cmd/jaeger "$ROOT/hack/tools/jaeger" \
		registry "$REGISTRY_DIR" github.com/distribution/distribution/v3/cmd/registry "$ROOT/hack/tools/registry" \
		tofu "$TOFU_DIR" github.com/opentofu/opentofu/cmd/tofu "$ROOT/hack/tools/tofu"
	# go install -n resolves and downloads without compiling.
	[ -x "$MINIO_DIR/minio" ] || GOWORK=off go install -n "github.com/minio/minio@$MINIO_VERSION" >/dev/null 2>&1 9>&- &
	build kube-apiserver "$KUBE_DIR" k8s.io/kubernetes/cmd/kube-apiserver "$ROOT/hack/tools/kube" "$KUBE_LDFLAGS"
	build etcd "$ETCD_DIR" ./cmd/etcd "$ROOT/hack/tools/etcd"
	build registry "$REGISTRY_DIR" github.com/distribution/distribution/v3/cmd/registry "$ROOT/hack/tools/registry"
	if [ ! -x "$MINIO_DIR/minio" ]; then
		say "building minio $MINIO_VERSION into $MINIO_DIR (first time only)"
		local start=$SECONDS
		mkdir -p "$MINIO_DIR"
		GOWORK=off GOBIN="$MINIO_DIR" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "github.com/minio/minio@$MINIO_VERSION" >&2 ||
			die "building minio failed"
		say "built minio in $((SECONDS - start))s"
	fi
	wait
	mkdir -p "$ASSETS"
	ln -sfn "$KUBE_DIR/kube-apiserver" "$ASSETS/kube-apiserver"
	ln -sfn "$ETCD_DIR/etcd" "$ASSETS/etcd"
	flock -u 9
}

build_late() {
	mkdir -p "$CACHE"
	(
		# A lock of its own: the core's (taken by every `registry up`) stays
		# free while Jaeger compiles.
		exec 9>"$CACHE/.build-late.lock"
		flock 9
		build jaeger "$JAEGER_DIR" github.com/jaegertracing/jaeger/cmd/jaeger "$ROOT/hack/tools/jaeger"
	)
	build_tofu
}

build_all() {
	build_core
	build_late
}

# build_tofu builds the OpenTofu CLI once. Its release builds link with
# version.dev=no (else `tofu version` reports a -dev prerelease); the version
# itself is embedded from the module's VERSION file. A lock of its own, so
# that the provider's tests can build it while another build runs.
build_tofu() {
	mkdir -p "$CACHE"
	(
		exec 8>"$CACHE/.build-tofu.lock"
		flock 8
		build tofu "$TOFU_DIR" github.com/opentofu/opentofu/cmd/tofu "$ROOT/hack/tools/tofu" \
			"-X github.com/opentofu/opentofu/version.dev=no"
	)
}

# pg_datadir prints where the private PostgreSQL cluster lives. As root,
# initdb and the server run as the postgres user (they refuse root), who
# cannot enter a state directory in root's home (the default, under
# ~/.cache): the cluster then lives in /var/lib/sless, named after the state
# directory so that two state directories keep two clusters. The choice is
# written down, so that later calls find the cluster again.
pg_datadir() {
	if [ -f "$STATE/postgres.datadir" ]; then
		cat "$STATE/postgres.datadir"
		return
	fi
	local dir=$STATE/postgres
	if [ "$(id -u)" = 0 ] && ! runuser -u postgres -- test -x "$STATE" 2>/dev/null; then
		dir=/var/lib/sless/postgres-$(printf '%s' "$STATE" | sha256sum | cut -c1-12)
	fi
	printf '%s\n' "$dir" >"$STATE/postgres.datadir"
	printf '%s\n' "$dir"
}

postgres_up() {
	listening $PG_PORT && return 0
	local pgdata bindir
	pgdata=$(pg_datadir)
	bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
	[ -n "$bindir" ] || { apt_install postgresql; bindir=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1); }
	if [ ! -f "$pgdata/PG_VERSION" ]; then
		say "creating a private PostgreSQL cluster in $pgdata (trust auth on loopback)"
		mkdir -p "$pgdata"
		chmod 700 "$pgdata"
		chown postgres: "$pgdata" 2>/dev/null || true
		as_postgres "$bindir/initdb" -D "$pgdata" -U postgres --auth=trust >/dev/null ||
			die "initdb failed for $pgdata (it runs as $(as_postgres id -un))"
	fi
	say "starting PostgreSQL on 127.0.0.1:$PG_PORT"
	as_postgres "$bindir/pg_ctl" -D "$pgdata" -l "$pgdata/server.log" -w \
		-o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k /tmp" start >/dev/null 7>&- ||
		die "PostgreSQL did not start; see $pgdata/server.log"
	touch "$STATE/postgres.ours"
}

as_postgres() {
	if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

rabbitmq_up() {
	local i
	listening $RABBIT_PORT && return 0
	command -v rabbitmq-server >/dev/null || apt_install rabbitmq-server
	if [ "$RABBIT_PORT" != 5672 ]; then
		rabbitmq_private_up
		return
	fi
	if timeout 30 rabbitmqctl -q ping >/dev/null 2>&1; then
		# The node runs but does not listen: its application was stopped
		# (a broker-restart test interrupted between stop_app and start_app).
		say "RabbitMQ's node is up with its application stopped: starting the application"
		timeout 120 rabbitmqctl -q start_app >&2 || rabbitmq_die "rabbitmqctl start_app failed"
	else
		say "starting RabbitMQ on 127.0.0.1:$RABBIT_PORT"
		rabbitmq_start
		touch "$STATE/rabbitmq.ours"
	fi
	wait_port $RABBIT_PORT 120 RabbitMQ rabbitmq_die
}

# RabbitMQ counts every file it holds open, sockets and the log segments
# of each quorum queue among them, against a limit drawn from its process's
# open-files limit at start (927 of the usual 1024). Past it, no new
# connection gets through the AMQP handshake, and services and tests time
# out on the broker. make test holds a dozen tenant vhosts of about 96
# quorum queues at a time, more than that: the node is started with
# RABBIT_NOFILE open files, and the machine's node, when it runs with
# fewer than RABBIT_MIN_NOFILE, is restarted once with that many
# (docs/dev/test-notes.md).
RABBIT_NOFILE=65536 RABBIT_MIN_NOFILE=16384

# rabbitmq_start: start the machine's node with RABBIT_NOFILE open files
# (or as many as the hard limit allows) and wait for it.
rabbitmq_start() {
	local i
	(
		ulimit -n "$RABBIT_NOFILE" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
		export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-rabbitmq_management tcp_config $RABBIT_MGMT_LISTENER"
		if [ "$(id -u)" = 0 ] && id rabbitmq >/dev/null 2>&1; then
			# Debian's rabbitmq-server switches to the rabbitmq user
			# through su, whose PAM session resets the open-files limit
			# to 1024; setpriv keeps it.
			cd /var/lib/rabbitmq
			HOME=/var/lib/rabbitmq exec setpriv --reuid=rabbitmq --regid=rabbitmq --init-groups /usr/lib/rabbitmq/bin/rabbitmq-server -detached
		fi
		exec rabbitmq-server -detached
	) >&2 7>&- || rabbitmq_die "rabbitmq-server did not start"
	# await_startup fails at once while the node is not reachable yet: retry.
	for ((i = 0; i < 60; i++)); do
		timeout 30 rabbitmqctl -q await_startup >/dev/null 2>&1 7>&- && break
		sleep 2
	done
}

# rabbitmq_open_files: restart the machine's node when its open-files
# limit is below RABBIT_MIN_NOFILE and a higher one can be had.
rabbitmq_open_files() {
	[ "$RABBIT_PORT" = 5672 ] || return 0
	local pid limit can i
	pid=$(timeout 60 rabbitmqctl -q eval 'list_to_integer(os:getpid()).' 2>/dev/null 7>&-) || return 0
	limit=$(awk '/^Max open files/ {print $4}' "/proc/$pid/limits" 2>/dev/null) || return 0
	[[ $limit =~ ^[0-9]+$ ]] && [ "$limit" -lt "$RABBIT_MIN_NOFILE" ] || return 0
	can=$(ulimit -n "$RABBIT_NOFILE" 2>/dev/null && ulimit -n || ulimit -Hn)
	[[ $can =~ ^[0-9]+$ ]] && [ "$can" -gt "$limit" ] || return 0
	say "RabbitMQ runs with $limit open files, too few for the tests' quorum queues: restarting it with $can"
	# A node out of file handles may never finish stopping (its message
	# stores wait for handles to close their files): then it is killed;
	# its quorum queues and durable messages are on disk.
	timeout 60 rabbitmqctl -q stop >&2 7>&- || say "rabbitmqctl stop did not finish: stopping the node's process"
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 60; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		[ "$i" = 30 ] && kill -KILL "$pid" 2>/dev/null
		sleep 1
	done
	kill -0 "$pid" 2>/dev/null && rabbitmq_die "RabbitMQ's node did not stop within 60s"
	rabbitmq_start
	wait_port $RABBIT_PORT 120 RabbitMQ rabbitmq_die
}

# rabbitmq_management: enable the management plugin (the operator keeps
# each tenant's vhost and user through its HTTP API) on 127.0.0.1:15672
# when the broker runs without it. The listener is set in the running node
# first, as the broker's own configuration may not be ours to edit.
rabbitmq_management() {
	[ "$RABBIT_PORT" = 5672 ] || return 0 # a private node runs without plugins
	listening $RABBIT_MGMT_PORT && return 0
	say "enabling RabbitMQ's management plugin on 127.0.0.1:$RABBIT_MGMT_PORT"
	timeout 60 rabbitmqctl -q eval "application:set_env(rabbitmq_management, tcp_config, $RABBIT_MGMT_LISTENER)." >/dev/null ||
		rabbitmq_die "could not configure the management listener"
	timeout 120 rabbitmq-plugins -q enable rabbitmq_management >&2 || rabbitmq_die "rabbitmq-plugins enable rabbitmq_management failed"
	wait_port $RABBIT_MGMT_PORT 60 "RabbitMQ management" rabbitmq_die
}

# rabbit_private runs a RabbitMQ command (within RABBIT_TIMEOUT seconds) for the private node of
# RABBIT_PORT: a node of its own (name, state, cookie, config; no plugins,
# or only the management plugin on SLESS_RABBITMQ_MANAGEMENT_PORT when that
# is set), so that it runs beside the machine's node and touches nothing of it. It
# runs as the calling user, whose state directory it is; the tests'
# rabbitmqctl calls need the machine's node, so 5672 keeps that one.
rabbit_private() {
	local cmd=$1 dir=$STATE/rabbitmq-$RABBIT_PORT dist=${SLESS_RABBITMQ_DIST_PORT:-}
	shift
	# RabbitMQ's own default is the AMQP port + 20000, when that is a port.
	[ -n "$dist" ] || dist=$((RABBIT_PORT <= 45535 ? RABBIT_PORT + 20000 : RABBIT_PORT - 1))
	mkdir -p "$dir/mnesia" "$dir/log"
	[ -f "$dir/rabbitmq-env.conf" ] || : >"$dir/rabbitmq-env.conf"
	printf 'listeners.tcp.local = 127.0.0.1:%s\n' "$RABBIT_PORT" >"$dir/rabbitmq.conf"
	if [ -n "${SLESS_RABBITMQ_MANAGEMENT_PORT:-}" ]; then
		echo '[rabbitmq_management].' >"$dir/enabled_plugins"
		printf 'management.tcp.ip = 127.0.0.1\nmanagement.tcp.port = %s\n' "$RABBIT_MGMT_PORT" >>"$dir/rabbitmq.conf"
	else
		echo '[].' >"$dir/enabled_plugins"
	fi
	HOME=$dir RABBITMQ_NODENAME=sless-$RABBIT_PORT@localhost RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT=$RABBIT_PORT \
		RABBITMQ_DIST_PORT=$dist RABBITMQ_MNESIA_BASE=$dir/mnesia RABBITMQ_LOG_BASE=$dir/log \
		RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins RABBITMQ_CONFIG_FILE=$dir/rabbitmq.conf RABBITMQ_CONF_ENV_FILE=$dir/rabbitmq-env.conf \
		RABBITMQ_PID_FILE=$dir/pid ERL_CRASH_DUMP=$dir/erl_crash.dump ERL_EPMD_ADDRESS=127.0.0.1 ERL_FLAGS="-kernel inet_dist_use_interface {127,0,0,1}" \
		timeout "${RABBIT_TIMEOUT:-0}" "/usr/lib/rabbitmq/bin/$cmd" "$@"
}

rabbitmq_private_up() {
	local i pid wait=${SLESS_RABBITMQ_START_TIMEOUT:-120}
	say "starting a private RabbitMQ node on 127.0.0.1:$RABBIT_PORT (state in $STATE/rabbitmq-$RABBIT_PORT)"
	mkdir -p "$STATE/rabbitmq-$RABBIT_PORT"
	# In the background like MinIO (-detached would lose the node's errors).
	rabbit_private rabbitmq-server </dev/null >"$STATE/rabbitmq-$RABBIT_PORT/server.out" 2>&1 7>&- &
	pid=$!
	disown
	touch "$STATE/rabbitmq-$RABBIT_PORT.ours"
	# A node with many vhosts recovers each before it listens: the
	# broker restart benchmark raises SLESS_RABBITMQ_START_TIMEOUT.
	for ((i = 0; i < wait * 10; i++)); do
		listening "$RABBIT_PORT" && break
		kill -0 "$pid" 2>/dev/null || rabbitmq_die "the private RabbitMQ node exited"
		sleep 0.1
	done
	listening "$RABBIT_PORT" || rabbitmq_die "RabbitMQ did not start listening on 127.0.0.1:$RABBIT_PORT within ${wait}s"
	RABBIT_TIMEOUT=$((wait > 60 ? wait : 60)) rabbit_private rabbitmqctl -q await_startup >/dev/null 2>&1 || rabbitmq_die "RabbitMQ did not finish starting"
	if [ -n "${SLESS_RABBITMQ_MANAGEMENT_PORT:-}" ]; then
		wait_port "$RABBIT_MGMT_PORT" "$wait" "RabbitMQ management" rabbitmq_die
	fi
}

# rabbitmq_private_stop: stop the private node of RABBIT_PORT (its state
# stays for the next up) and wait until its process ended.
rabbitmq_private_stop() {
	local dir=$STATE/rabbitmq-$RABBIT_PORT pid i
	[ "$RABBIT_PORT" != 5672 ] || die "rabbitmq stop stops a private node only: set SLESS_RABBITMQ_PORT"
	pid=$(cat "$dir/pid" 2>/dev/null) || pid=
	if ! listening "$RABBIT_PORT" && ! { [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; }; then return 0; fi
	RABBIT_TIMEOUT=300 rabbit_private rabbitmqctl -q stop >&2 || say "rabbitmqctl stop failed: stopping the node's process"
	rm -f "$STATE/rabbitmq-$RABBIT_PORT.ours"
	[ -n "$pid" ] || return 0
	for ((i = 0; i < 600; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		[ "$i" = 300 ] && kill -TERM "$pid" 2>/dev/null
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then die "the private RabbitMQ node (pid $pid) did not stop within 60s"; fi
}

# rabbitmq_gc: delete the vhosts of test binaries that died before their
# cleanup ran (named sless-test-<unix time>-<hex>, older than 3 hours; and
# the older sless-test-<hex> names). Each holds the platform's quorum queues,
# and a broker that piles them up is slow to serve and to start.
rabbitmq_gc() {
	[ "$RABBIT_PORT" = 5672 ] || return 0 # a private node has no test vhosts of old runs
	local now v n=0
	now=$(date +%s)
	while read -r v; do
		if [[ $v =~ ^sless-test-([0-9]{10})-[0-9a-f]{10}$ ]]; then
			((now - BASH_REMATCH[1] > 10800)) || continue
		elif [[ ! $v =~ ^sless-test-[0-9a-f]{10}$ ]]; then
			continue
		fi
		timeout 60 rabbitmqctl -q delete_vhost "$v" >/dev/null 2>&1 && n=$((n + 1))
	done < <(timeout 60 rabbitmqctl -q list_vhosts --no-table-headers name 2>/dev/null)
	[ "$n" -eq 0 ] || say "deleted $n RabbitMQ vhosts left behind by killed test runs"
}

# rabbitmq_die MESSAGE: fail with what the broker said about itself.
rabbitmq_die() {
	say "$1; rabbitmqctl status and the end of the RabbitMQ log follow"
	if [ "$RABBIT_PORT" = 5672 ]; then
		timeout 30 rabbitmqctl status >&2 2>&1 || true
		tail -n 40 /var/log/rabbitmq/rabbit@*.log >&2 2>/dev/null || true
	else
		tail -n 40 "$STATE/rabbitmq-$RABBIT_PORT/server.out" >&2 2>/dev/null || true
	fi
	die "$1"
}

minio_creds() {
	local f=$STATE/minio/credentials
	if [ ! -f "$f" ]; then
		mkdir -p "$STATE/minio"
		umask 077
		printf 'MINIO_ROOT_USER=sless%s\nMINIO_ROOT_PASSWORD=%s\n' \
			"$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')" "$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')" >"$f"
	fi
	# shellcheck disable=SC1090
	. "$f"
}

minio_up() {
	minio_creds
	listening "$MINIO_PORT" && return 0
	say "starting MinIO on 127.0.0.1:$MINIO_PORT (data in $STATE/minio/data)"
	mkdir -p "$STATE/minio/data"
	MINIO_ROOT_USER=$MINIO_ROOT_USER MINIO_ROOT_PASSWORD=$MINIO_ROOT_PASSWORD MINIO_BROWSER=off \
		setsid nohup "$MINIO_DIR/minio" server --quiet --address "127.0.0.1:$MINIO_PORT" \
		--console-address "127.0.0.1:$((MINIO_PORT + 1))" "$STATE/minio/data" \
		>"$STATE/minio/server.log" 2>&1 </dev/null 7>&- &
	echo $! >"$STATE/minio/pid"
	wait_port "$MINIO_PORT" 60 MinIO
	local i
	for ((i = 0; i < 100; i++)); do
		curl -fsS "http://127.0.0.1:$MINIO_PORT/minio/health/ready" >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	die "MinIO is not ready; see $STATE/minio/server.log"
}

# jaeger_up starts Jaeger all-in-one (OTLP on 127.0.0.1:4318, the query API
# on 16686) as a shared server, like MinIO: make dev and every test that
# reads traces use the one running, and none of them stops it (down does).
# A Jaeger owned by one test process died with it, under the make dev of
# another test that had found it running.
jaeger_up() {
	listening 4318 && listening 16686 && return 0
	[ -x "$JAEGER_DIR/jaeger" ] || build_late
	exec 7>"$STATE/jaeger.lock"
	flock 7
	if ! listening 4318; then
		mkdir -p "$STATE/jaeger"
		say "starting Jaeger (OTLP on 127.0.0.1:4318, query API on 127.0.0.1:16686)"
		setsid nohup "$JAEGER_DIR/jaeger" >"$STATE/jaeger/server.log" 2>&1 </dev/null 7>&- &
		echo $! >"$STATE/jaeger/pid"
	fi
	flock -u 7
	exec 7>&-
	wait_port 4318 60 Jaeger
	wait_port 16686 60 Jaeger
}

# registry_up starts the Distribution registry on loopback (plain HTTP,
# which clients allow for 127.0.0.1 without configuration), its blobs under
# the state directory, deletes enabled so that tests can clean up.
registry_up() {
	listening "$REGISTRY_PORT" && return 0
	local dir=$STATE/registry
	say "starting the registry on 127.0.0.1:$REGISTRY_PORT (data in $dir/data)"
	mkdir -p "$dir/data"
	cat >"$dir/config.yml" <<EOC
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $dir/data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$REGISTRY_PORT
EOC
	# Its tracing is off: it would export to an OTLP collector by default.
	OTEL_TRACES_EXPORTER=none setsid nohup "$REGISTRY_DIR/registry" serve "$dir/config.yml" \
		>"$dir/server.log" 2>&1 </dev/null 7>&- &
	echo $! >"$dir/pid"
	wait_port "$REGISTRY_PORT" 30 "the registry"
	local i
	for ((i = 0; i < 50; i++)); do
		curl -fsS "http://127.0.0.1:$REGISTRY_PORT/v2/" >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	die "the registry does not answer /v2/; see $dir/server.log"
}

print_env() {
	minio_creds
	cat <<EOT
export SLESS_CACHE_DIR='$CACHE'
export KUBEBUILDER_ASSETS='$ASSETS'
export SLESS_TEST_POSTGRES_URL='postgres://postgres@127.0.0.1:$PG_PORT/postgres?sslmode=disable'
export SLESS_TEST_RABBITMQ_URL='amqp://guest:guest@127.0.0.1:$RABBIT_PORT/'
export SLESS_TEST_RABBITMQ_MANAGEMENT_URL='http://127.0.0.1:$RABBIT_MGMT_PORT'
export SLESS_TEST_S3_ENDPOINT='127.0.0.1:$MINIO_PORT'
export SLESS_TEST_S3_ACCESS_KEY='$MINIO_ROOT_USER'
export SLESS_TEST_S3_SECRET_KEY='$MINIO_ROOT_PASSWORD'
export SLESS_DEPS_SCRIPT='$ROOT/hack/deps.sh'
export SLESS_JAEGER_BIN='$JAEGER_DIR/jaeger'
export SLESS_TEST_REGISTRY='127.0.0.1:$REGISTRY_PORT'
export SLESS_TOFU_BIN='$TOFU_DIR/tofu'
export SLESS_CHROMIUM_BIN='$(command -v chromium || echo /usr/bin/chromium)'
EOT
	"$ROOT/hack/runtime-bases.sh" env # the runtime bases' cached layouts
}

# postgres_ctl stop|start: stop or start the PostgreSQL the tests use, for
# the outage tests (the Debian cluster on 5432, or the private one).
postgres_ctl() {
	local bindir
	bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
	if [ -f "$STATE/postgres.ours" ]; then
		local pgdata
		pgdata=$(pg_datadir)
		as_postgres "$bindir/pg_ctl" -D "$pgdata" -l "$pgdata/server.log" -w \
			-o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k /tmp" "$1" -m fast >/dev/null
	elif command -v pg_ctlcluster >/dev/null && [ -n "$(ls /etc/postgresql 2>/dev/null)" ]; then
		pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -1)" main "$1" >/dev/null
	else
		die "cannot $1 PostgreSQL: it was not started by this script or by Debian's pg_ctlcluster"
	fi
}

down() {
	if [ -f "$STATE/minio/pid" ]; then kill "$(cat "$STATE/minio/pid")" 2>/dev/null || true; rm -f "$STATE/minio/pid"; fi
	if [ -f "$STATE/registry/pid" ]; then kill "$(cat "$STATE/registry/pid")" 2>/dev/null || true; rm -f "$STATE/registry/pid"; fi
	if [ -f "$STATE/jaeger/pid" ]; then kill "$(cat "$STATE/jaeger/pid")" 2>/dev/null || true; rm -f "$STATE/jaeger/pid"; fi
	if [ -f "$STATE/postgres.ours" ]; then
		as_postgres "$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)/pg_ctl" -D "$(pg_datadir)" stop -m fast >/dev/null || true
		rm -f "$STATE/postgres.ours"
	fi
	if [ "$RABBIT_PORT" != 5672 ] && [ -f "$STATE/rabbitmq-$RABBIT_PORT.ours" ]; then
		RABBIT_TIMEOUT=60 rabbit_private rabbitmqctl -q stop >/dev/null 2>&1 || true
		rm -f "$STATE/rabbitmq-$RABBIT_PORT.ours"
	fi
	if [ "$RABBIT_PORT" = 5672 ] && [ -f "$STATE/rabbitmq.ours" ]; then rabbitmqctl stop >/dev/null 2>&1 || true; rm -f "$STATE/rabbitmq.ours"; fi
}

# servers_up holds a lock while it checks and starts the servers: two runs
# of this script at once (helpers, a test beside make dev) would otherwise
# both find a port free and start two MinIOs over one data directory.
# Every server it starts gets 7>&-, so that none holds the lock.
servers_up() {
	exec 7>"$STATE/servers.lock"
	flock 7
	postgres_up
	rabbitmq_up
	rabbitmq_open_files
	rabbitmq_management
	rabbitmq_gc
	minio_up
	registry_up
	flock -u 7
	exec 7>&-
}

# The servers are shared (tests, every make dev) and outlive the make dev
# that started them: this marks them, for whoever looks for what a run left.
export SLESS_DEPS_SERVER=1
mkdir -p "$STATE"
case "${1:-up}" in
up)
	for tool in go python3 node curl; do command -v $tool >/dev/null || die "$tool not found on PATH (prerequisites: Go, Python 3.11, Node 20, curl)"; done
	build_all
	chromium_install
	servers_up
	;;
# up-core: what up does without Jaeger and OpenTofu (hack/test.sh builds
# those with build-late beside the first tests).
up-core)
	for tool in go python3 node curl; do command -v $tool >/dev/null || die "$tool not found on PATH (prerequisites: Go, Python 3.11, Node 20, curl)"; done
	build_core
	chromium_install
	servers_up
	;;
build) build_all ;;
chromium) chromium_install ;;
build-late) build_late ;;
tofu)
	build_tofu
	printf '%s\n' "$TOFU_DIR/tofu"
	;;
env) print_env ;;
postgres)
	case "${2:-}" in
	up) postgres_up ;;
	stop | start) postgres_ctl "$2" ;;
	*) die "usage: hack/deps.sh postgres up|stop|start" ;;
	esac
	;;
rabbitmq)
	case "${2:-}" in
	up) rabbitmq_up ;;
	stop) rabbitmq_private_stop ;;
	*) die "usage: hack/deps.sh rabbitmq up|stop" ;;
	esac
	;;
jaeger)
	[ "${2:-}" = up ] || die "usage: hack/deps.sh jaeger up"
	jaeger_up
	;;
registry)
	[ "${2:-}" = up ] || die "usage: hack/deps.sh registry up"
	build_core
	registry_up
	;;
down) down ;;
*) die "usage: hack/deps.sh [up|up-core|env|build|build-late|tofu|chromium|down|postgres ...|rabbitmq up|stop|registry up|jaeger up]" ;;
esac
