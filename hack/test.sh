#!/usr/bin/env bash
# make test: every test of the project against the real servers.
#
# Two lanes run side by side, because much of the platform-wide tests'
# time is spent waiting (on the cluster, on a whole make dev, on the
# network while the runtime bases are fetched) while the module tests
# need the CPU:
#
#   modules   the tests of pkg and the invoker, verify, then the other
#             modules' tests in turn (the builder's wait for the runtime
#             bases, which its image test runs on);
#   platform  from the first second (beside the servers' builds): the
#             runtime bases and the runtime wrappers' own tests, Jaeger and
#             OpenTofu (all cached by version); once the servers are up,
#             the bases' push, then two things at once: the tests that need
#             no cluster (e2e, the Terraform provider's acceptance tests,
#             the chart's and the scheduler's), and the one-node cluster's
#             programs and the platform images (make test-images); last the
#             cluster test (the Helm chart on the cluster), alone.
#
# The few module tests that stop a shared server (the broker's
# application, PostgreSQL) and the platform-wide tests take one
# machine-wide lock (pkg/testenv/outage.go), so an outage never lands in
# the middle of a platform-wide test. The platform lane's output is kept
# in a file and printed when it ends; after a failure of the module lane
# it starts no new step. Each step prints its time, and a table of them
# closes the run.
#
#   hack/test.sh          both lanes (what make test runs)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

# One build of the workspace's dependencies for the tests, the make dev
# binaries and the images: ko builds static binaries (CGO_ENABLED=0) with
# -trimpath, and a package built with other settings is compiled again, so
# every Go command of the run uses ko's, except the race detector's (which
# needs cgo, and is a build of its own anyway). The tools under hack/
# set their own (docs/contributing.md).
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:+$GOFLAGS }-trimpath"

# Every module of the Makefile's MODULES is in exactly one lane.
# The modules whose tests stop shared servers (pkg, the invoker) go first,
# before make verify, so that their outages come while the platform lane
# builds and runs the cluster test's first half, which holds no lock.
MODULE_LANE_FIRST="pkg services/invoker"
MODULE_LANE="migrations runtimes services/gateway services/builder services/operator cli hack/devcluster"
# The platform lane's tests: those that need no cluster (run beside the
# cluster's builds), then the cluster's.
PLATFORM_TESTS="e2e terraform deploy/helm services/scheduler"
PLATFORM_LANE="$PLATFORM_TESTS hack/cluster"
modules=$(make -s --no-print-directory print-modules)
[ -n "$modules" ] || { echo "hack/test.sh: make print-modules printed nothing" >&2; exit 1; }
for m in $modules; do
	case " $MODULE_LANE_FIRST $MODULE_LANE $PLATFORM_LANE " in
	*" $m "*) ;;
	*) echo "hack/test.sh: module $m (Makefile MODULES) is in neither lane" >&2; exit 1 ;;
	esac
done

# gotest MODULE: the module's tests; pkg/ and the services' internal
# packages under the race detector (docs/contributing.md).
gotest() {
	local m=$1
	case $m in
	pkg) (cd "$m" && CGO_ENABLED=1 go test -race -count=1 -timeout 25m ./...) ;;
	# The operator's controller package passed its 25 minutes (1,516 s)
	# beside a scale benchmark, e2e and -race builds of other modules.
	services/*) (cd "$m" && go test -count=1 -timeout 25m . && CGO_ENABLED=1 go test -race -count=1 -timeout 40m ./internal/...) ;;
	terraform) (cd "$m" && TF_ACC=1 go test -count=1 -timeout 40m ./...) ;;
	hack/cluster) (cd "$m" && go test -count=1 -timeout 40m -v ./...) ;;
	# Its tests start a whole make dev each: about 1,100 s beside the rest,
	# past 25 minutes on a cold machine beside the cluster's builds.
	e2e) (cd "$m" && go test -count=1 -timeout 45m ./...) ;;
	*) (cd "$m" && go test -count=1 -timeout 25m ./...) ;;
	esac
}

# step NAME COMMAND...: run it with a header and its time, recorded in
# $TIMES for the closing table.
step() {
	local name=$1 start=$SECONDS
	shift
	printf '== %s\n' "$name"
	if ! "$@"; then
		printf '== %s: FAILED after %d s\n' "$name" $((SECONDS - start))
		printf '%s\t%d\tFAILED\n' "$name" $((SECONDS - start)) >>"$TIMES"
		return 1
	fi
	printf '== %s: ok in %d s\n' "$name" $((SECONDS - start))
	printf '%s\t%d\n' "$name" $((SECONDS - start)) >>"$TIMES"
}

# The platform lane, run by the main one as `hack/test.sh platform-lane`
# in a session of its own, from the start: what it builds first needs none
# of the servers, so it builds beside them ($CORE_DONE marks them up). It
# starts no new step once the module lane has failed ($MODULES_FAILED), a
# test beside the cluster's builds has failed ($TESTS_FAILED) or the main
# script is gone, and lets the step that runs end on its own, so that its
# tests stop what they started (a make dev, the cluster).
platform_lane() {
	go_on() { [ ! -e "$MODULES_FAILED" ] && [ ! -e "$TESTS_FAILED" ] && kill -0 "$MAIN" 2>/dev/null; }
	go_on || exit 1
	step "build the runtime bases" hack/runtime-bases.sh build
	go_on || exit 1
	step "make test-runtimes" make --no-print-directory test-runtimes
	go_on || exit 1
	step "build Jaeger and OpenTofu" hack/deps.sh build-late
	local waited=$SECONDS
	until [ -e "$CORE_DONE" ]; do
		go_on || exit 1
		sleep 2
	done
	printf '== waited %d s for the servers\n' $((SECONDS - waited))
	go_on || exit 1
	step "make runtime-bases" make --no-print-directory runtime-bases
	touch "$BASES_DONE"
	# The tests that need no cluster wait mostly on their servers, the
	# cluster's builds on the CPU: side by side, with an output of their own
	# (printed after this lane's).
	(
		for m in $PLATFORM_TESTS; do
			go_on || exit 1
			step "go test $m" gotest "$m" || { touch "$TESTS_FAILED"; exit 1; }
		done
	) >"$TESTS_LOG" 2>&1 &
	tests=$!
	# However this lane ends, the tests beside it end first (the main
	# script's wait is on this lane only).
	trap 'wait "$tests" 2>/dev/null || true' EXIT
	go_on || exit 1
	step "build the cluster's programs" hack/cluster.sh build
	go_on || exit 1
	step "make test-images" make --no-print-directory test-images
	waited=$SECONDS
	wait "$tests" || exit 1
	printf '== waited %d s for the tests beside the builds\n' $((SECONDS - waited))
	go_on || exit 1
	step "go test hack/cluster" gotest hack/cluster
}

if [ "${1:-}" = platform-lane ]; then
	platform_lane
	exit
fi

begin=$SECONDS
work=$(mktemp -d)
export MAIN=$$ TIMES=$work/times BASES_DONE=$work/bases.done MODULES_FAILED=$work/modules.failed \
	CORE_DONE=$work/core.done TESTS_FAILED=$work/tests.failed TESTS_LOG=$work/platform-tests.log
: >"$TIMES"
lane=
# On an interrupt the platform lane is stopped at once (its tests' servers
# may outlive it: hack/cluster.sh down and the next run's deps clean up).
stop_lane() {
	touch "$MODULES_FAILED"
	if [ -n "$lane" ] && kill -0 "$lane" 2>/dev/null; then
		kill -TERM -- "-$lane" 2>/dev/null || true
		wait "$lane" 2>/dev/null || true
	fi
}
trap 'stop_lane; rm -rf "$work"' EXIT
trap 'echo "== interrupted"; exit 130' INT TERM

# The environment names where the servers and tools will be (it needs
# none of them built), so the platform lane starts at once.
deps_env=$(hack/deps.sh env)
eval "$deps_env"
setsid "$ROOT/hack/test.sh" platform-lane >"$work/platform.log" 2>&1 &
lane=$!
step "hack/deps.sh up-core" hack/deps.sh up-core
touch "$CORE_DONE"

modules() {
	# (set -e does not act inside a function called as a condition)
	for m in $MODULE_LANE_FIRST; do
		step "go test $m" gotest "$m" || return 1
	done
	step "make verify" make --no-print-directory verify || return 1
	for m in $MODULE_LANE; do
		if [ "$m" = services/builder ] && [ ! -e "$BASES_DONE" ]; then
			local waited=$SECONDS
			until [ -e "$BASES_DONE" ]; do
				kill -0 "$lane" 2>/dev/null || { echo "== the platform lane ended before the runtime bases were built"; return 1; }
				sleep 2
			done
			printf '== waited %d s for the runtime bases\n' $((SECONDS - waited))
		fi
		step "go test $m" gotest "$m" || return 1
	done
}

status=0
if ! modules; then
	status=1
	touch "$MODULES_FAILED"
	echo "== the module lane failed: the platform lane ends the step it is in and stops"
fi
waited=$SECONDS
wait "$lane" || status=1
lane=
[ $status = 0 ] && printf '== the module lane waited %d s for the platform lane\n' $((SECONDS - waited))
echo "== the platform lane's output"
cat "$work/platform.log"
if [ -s "$TESTS_LOG" ]; then
	echo "== the output of the platform lane's tests beside the cluster's builds"
	cat "$TESTS_LOG"
fi
echo
echo "== times (s; the two lanes overlap)"
awk -F'\t' '{printf "  %-40s %6s %s\n", $1, $2, $3}' "$TIMES"
printf '== make test: %s in %d min %d s\n' "$([ $status = 0 ] && echo ok || echo FAILED)" $(((SECONDS - begin) / 60)) $(((SECONDS - begin) % 60))
exit $status
