#!/usr/bin/env bash
# make dev: the whole platform on this machine (the local profile).
#
# Builds what is missing, starts PostgreSQL, RabbitMQ, MinIO, etcd and
# kube-apiserver (with the CRDs), runs the five services with the local
# build and execution drivers, creates the demo tenant, deploys the
# examples, and prints how to call them. Logs go to the terminal with a
# prefix per service and to files under $STATE/dev/logs. A process that
# exits is reported loudly and restarted with backoff. Ctrl-C stops
# everything it started. Data (etcd, PostgreSQL, MinIO, artifacts) is kept,
# so a second run finds the deployed functions again.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
say() { printf '\033[1mdev:\033[0m %s\n' "$*" >&2; }
die() { printf 'dev: ERROR: %s\n' "$*" >&2; exit 1; }

for tool in go python3 node npm curl psql; do
	command -v $tool >/dev/null || die "$tool is not installed (prerequisites: Go, Python 3.11, Node.js 20 with npm, curl; psql comes with PostgreSQL)"
done
python3 -c 'import sys; sys.exit(0 if sys.version_info[:2] >= (3, 11) else 1)' || die "python3 is $(python3 --version); sless needs 3.11"
[ "$(node -p 'process.versions.node.split(".")[0]')" -ge 20 ] || die "node is $(node --version); sless needs 20"

hack/deps.sh up
eval "$(hack/deps.sh env)"
# SLESS_DEV_STATE, _DATABASE, _BUCKET and _RABBITMQ_URL let a second
# platform (the end-to-end tests) run beside a developer's make dev.
STATE=${SLESS_DEV_STATE:-${SLESS_STATE_DIR:-$SLESS_CACHE_DIR/state}/dev}
DATABASE=${SLESS_DEV_DATABASE:-sless}
mkdir -p "$STATE/logs" "$STATE/functions"
STATE=$(cd "$STATE" && pwd)

# run_pids: the processes of a make dev on $STATE other than this shell:
# each carries SLESS_DEV_RUN=$STATE (exported below, inherited by all, etcd
# and kube-apiserver too, which envtest starts in process groups of their
# own, out of Ctrl-C's reach); an etcd on $STATE/etcd counts too.
run_pids() {
	local e p
	for e in /proc/[0-9]*/environ; do
		p=${e#/proc/}
		p=${p%/environ}
		[ "$p" = $$ ] || [ "$p" = "$BASHPID" ] && continue
		if grep -qzxF "SLESS_DEV_RUN=$STATE" "$e" 2>/dev/null || grep -qzxF -- "--data-dir=$STATE/etcd" "/proc/$p/cmdline" 2>/dev/null; then
			printf '%s\n' "$p"
		fi
	done
}
describe_pids() {
	local p
	for p in "$@"; do printf '  %s %s\n' "$p" "$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-120)"; done
}
mapfile -t HOLDERS < <(run_pids)
if [ ${#HOLDERS[@]} -gt 0 ]; then
	die "$(printf 'processes of an earlier make dev still hold %s:\n%s\nstop them (kill %s) or set SLESS_DEV_STATE to another directory' \
		"$STATE" "$(describe_pids "${HOLDERS[@]}")" "${HOLDERS[*]}")"
fi
export SLESS_DEV_RUN=$STATE
# $STATE/ready.json appears once the platform serves the demo (gateway URL
# and tokens); scripts and the end-to-end tests wait for it, not for the banner.
READY="$STATE/ready.json"
rm -f "$READY"
GATEWAY_PORT=${SLESS_DEV_PORT:-8080}
OPS=${SLESS_DEV_OPS_BASE:-9190} # the services' ops ports are OPS..OPS+4
GATEWAY="http://127.0.0.1:$GATEWAY_PORT"
(exec 3<>"/dev/tcp/127.0.0.1/$GATEWAY_PORT") 2>/dev/null && die "port $GATEWAY_PORT is taken (another make dev?); set SLESS_DEV_PORT"

say "building the services"
mkdir -p bin
for s in gateway builder operator invoker scheduler; do
	(cd "services/$s" && go build -o "$ROOT/bin/$s" .) || die "building $s failed"
done
go build -o bin/devcluster ./hack/devcluster || die "building devcluster failed"
(cd cli && go build -o "$ROOT/bin/sless" .) || die "building the sless CLI failed"

# Everything below runs in this process group; Ctrl-C stops it all.
PIDS=()
cleanup() {
	trap - INT TERM EXIT
	say "stopping"
	for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill -TERM "${PIDS[i]}" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	# Whatever is left of the run (a control plane whose devcluster
	# crashed, a process that ignored TERM) is stopped too.
	local left i
	mapfile -t left < <(run_pids)
	if [ ${#left[@]} -gt 0 ]; then
		say "stopping what is left of this run:"
		describe_pids "${left[@]}" >&2
		kill -TERM "${left[@]}" 2>/dev/null || true
		for ((i = 0; i < 100; i++)); do
			mapfile -t left < <(run_pids)
			[ ${#left[@]} -eq 0 ] && break
			sleep 0.1
		done
		[ ${#left[@]} -eq 0 ] || kill -KILL "${left[@]}" 2>/dev/null || true
	fi
	say "stopped; data is kept in $STATE (and the dependency cache)"
}
trap cleanup INT TERM EXIT

# supervise NAME CMD...: run CMD; whenever it exits on its own, say so
# loudly and start it again after a pause that doubles up to 30 s (back to
# 1 s once it ran for a minute). The platform never runs on silently with a
# part missing: a service that crashes on a message is back in seconds, and
# the terminal shows that it crashed and how often. TERM or INT stops CMD
# (it gets TERM and time to shut down) and the supervision.
supervise() {
	local name=$1
	shift
	local delay=1 child=0 stopping=0 began rc
	trap 'stopping=1; [ "$child" -gt 0 ] && kill -TERM "$child" 2>/dev/null' INT TERM
	while :; do
		began=$SECONDS
		"$@" &
		child=$!
		[ "$stopping" = 1 ] && kill -TERM "$child" 2>/dev/null # TERM came before child was set
		rc=0
		wait "$child" || rc=$?
		# A trap interrupts wait; the child may still be shutting down.
		while kill -0 "$child" 2>/dev/null; do wait "$child" || rc=$?; done
		[ "$stopping" = 1 ] && exit 0
		((SECONDS - began >= 60)) && delay=1
		printf '\033[1;31mdev: !!! %s EXITED (status %d); restarting it in %ds (see %s)\033[0m\n' "$name" "$rc" "$delay" "$STATE/logs/$name.log" >&2
		sleep "$delay" &
		child=$!
		wait "$child" || true
		[ "$stopping" = 1 ] && exit 0
		delay=$((delay * 2 > 30 ? 30 : delay * 2))
	done
}

# start NAME CMD...: run a supervised process with prefixed output, also
# logged to a file.
start() {
	local name=$1
	shift
	# The prefixer ignores Ctrl-C and ends when the service closes its
	# output, so a stopping service can still log (and is not killed by
	# SIGPIPE halfway through its shutdown).
	supervise "$name" "$@" > >(trap '' INT TERM; while IFS= read -r line; do printf '[%-9s] %s\n' "$name" "$line"; done | tee -a "$STATE/logs/$name.log") 2>&1 &
	PIDS+=($!)
}

rm -f "$STATE/kubeconfig"
start cluster bin/devcluster -data "$STATE/etcd" -write-kubeconfig "$STATE/kubeconfig"
# devcluster gives etcd and kube-apiserver 40 s each to start.
for ((i = 0; i < 1000; i++)); do [ -f "$STATE/kubeconfig" ] && break; sleep 0.1; done
[ -f "$STATE/kubeconfig" ] || die "the control plane did not start; see $STATE/logs/cluster.log"

[ -f "$STATE/admin-token" ] || (umask 077; od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$STATE/admin-token")
ADMIN=$(cat "$STATE/admin-token")
psql -h 127.0.0.1 -U postgres -tc "SELECT 1 FROM pg_database WHERE datname = '$DATABASE'" 2>/dev/null | grep -q 1 ||
	psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE \"$DATABASE\"" >/dev/null 2>&1 || die "cannot create the database $DATABASE"

export KUBECONFIG="$STATE/kubeconfig"
export SLESS_RABBITMQ_URL="${SLESS_DEV_RABBITMQ_URL:-$SLESS_TEST_RABBITMQ_URL}"
# The operator keeps each tenant's vhost and user through the management
# API, as the user of SLESS_RABBITMQ_URL; tenants reach the same broker.
export SLESS_RABBITMQ_MANAGEMENT_URL="${SLESS_TEST_RABBITMQ_MANAGEMENT_URL:-http://127.0.0.1:15672}"
export SLESS_POSTGRES_URL="postgres://postgres@127.0.0.1:5432/$DATABASE?sslmode=disable"
export SLESS_S3_ENDPOINT="$SLESS_TEST_S3_ENDPOINT" SLESS_S3_ACCESS_KEY="$SLESS_TEST_S3_ACCESS_KEY" SLESS_S3_SECRET_KEY="$SLESS_TEST_S3_SECRET_KEY"
export SLESS_S3_BUCKET=${SLESS_DEV_BUCKET:-sless} SLESS_PUBLIC_URL="$GATEWAY" SLESS_ARTIFACT_DIR="$STATE/artifacts"
export SLESS_EXECUTION_DRIVER=local SLESS_BUILD_DRIVER=local SLESS_RUNTIMES_DIR="$ROOT/runtimes" SLESS_FUNCTION_LOG_DIR="$STATE/functions"
export SLESS_ADMIN_TOKEN="$ADMIN" SLESS_HTTP_ADDR="127.0.0.1:$GATEWAY_PORT" SLESS_DRAIN_DELAY=0s
# The local profile: callback receivers and external brokers on this machine.
export SLESS_EGRESS_ALLOW_CIDRS=127.0.0.0/8,::1/128

# Traces: a Jaeger all-in-one receives OTLP from every service: the shared
# one hack/deps.sh runs (started if none is), which outlives this make dev.
"$ROOT/hack/deps.sh" jaeger up
export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 OTEL_BSP_SCHEDULE_DELAY=500
# The web console draws an invocation's trace from Jaeger's query API.
export SLESS_TRACE_QUERY_URL=http://127.0.0.1:16686

SLESS_OPS_ADDR=127.0.0.1:$((OPS + 0)) start gateway bin/gateway
SLESS_OPS_ADDR=127.0.0.1:$((OPS + 1)) start builder bin/builder
SLESS_OPS_ADDR=127.0.0.1:$((OPS + 2)) start operator bin/operator
SLESS_OPS_ADDR=127.0.0.1:$((OPS + 3)) start invoker bin/invoker
SLESS_OPS_ADDR=127.0.0.1:$((OPS + 4)) start scheduler bin/scheduler

for port in $OPS $((OPS + 1)) $((OPS + 2)) $((OPS + 3)) $((OPS + 4)); do
	for ((i = 0; i < 600; i++)); do
		curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
		sleep 0.1
	done
	curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 || die "the service on ops port $port is not ready; see $STATE/logs"
done
say "all five services are ready"

# The demo is seeded with the sless CLI, with contexts of its own (the
# developer's ~/.config/sless is left alone).
sless() { XDG_CONFIG_HOME="$STATE/cli" SLESS_URL="$GATEWAY" "$ROOT/bin/sless" "$@"; }

# The demo tenant and its token (kept between runs).
SLESS_TOKEN=$ADMIN sless tenants create demo --display-name "Demo tenant" --exist-ok --wait 60s >/dev/null || die "the demo tenant did not become ready"
if [ ! -f "$STATE/demo-token" ] || ! SLESS_TOKEN=$(cat "$STATE/demo-token") SLESS_TENANT=demo sless fn list >/dev/null 2>&1; then
	(umask 077; SLESS_TOKEN=$ADMIN sless tokens create demo --name make-dev 2>/dev/null >"$STATE/demo-token") || die "cannot issue the demo token"
fi
TOKEN=$(cat "$STATE/demo-token")

# The examples, each with its sless.yaml (settings and triggers), deployed
# side by side; each deploy waits until its function is Ready or failed.
say "deploying the examples (sless deploy; output in $STATE/logs/deploy-*.log)"
DEPLOYS=()
for ex in hello-node simple-node simple-python notes-python; do
	SLESS_TOKEN=$TOKEN SLESS_TENANT=demo sless deploy "examples/$ex" --env "NOTES_DB=$STATE/notes.db" >"$STATE/logs/deploy-$ex.log" 2>&1 &
	DEPLOYS+=("$ex:$!")
done
for d in "${DEPLOYS[@]}"; do
	if wait "${d#*:}"; then say "  ${d%%:*}: Ready"; else say "  ${d%%:*}: FAILED (see $STATE/logs/deploy-${d%%:*}.log)"; fi
done

(umask 077; printf '{"gateway":"%s","admin_token":"%s","demo_token":"%s","state":"%s"}\n' "$GATEWAY" "$ADMIN" "$TOKEN" "$STATE" >"$READY.tmp")
mv "$READY.tmp" "$READY" # atomic: a reader sees all of it or nothing

cat <<EOT

  sless is running (local profile).

  gateway      $GATEWAY        (OpenAPI: $GATEWAY/openapi.json)
  console      $GATEWAY/ui/    (log in with the demo token)
  admin token  $ADMIN
  demo token   $TOKEN
  traces       http://127.0.0.1:16686/api/traces?service=gateway (Jaeger query API; the console draws the traces)
  logs         $STATE/logs/*.log, function logs in $STATE/functions/
  kubectl      KUBECONFIG=$STATE/kubeconfig
  ready file   $READY

  Try the CLI (bin/sless; these variables select the demo tenant):
    export XDG_CONFIG_HOME=$STATE/cli SLESS_URL=$GATEWAY SLESS_TENANT=demo SLESS_TOKEN=$TOKEN
    bin/sless fn list
    bin/sless invoke simple-node -d '{"numbers":[1,2,3]}'
    bin/sless invoke simple-python --async -d 'async'
    bin/sless invocations list --limit 5
    bin/sless logs simple-python -f
    bin/sless trace INVOCATION_ID          (spans from the Jaeger query API)
  or curl:
    curl -s $GATEWAY/fn/demo/hello?name=you
    curl -s -X POST $GATEWAY/fn/demo/api/notes -H "Authorization: Bearer \$SLESS_TOKEN" -H 'Content-Type: application/json' -d '{"text":"buy milk"}'

  The queue trigger "numbers" consumes demo-numbers in the tenant's vhost (sless-t-demo);
  the cron trigger "every-minute" calls simple-python every minute.
  Ctrl-C stops everything.

EOT
wait
