#!/usr/bin/env bash
# Builds the platform's five images with ko (static Go binaries on a minimal
# non-root base, reproducible) and pushes them by digest to a registry: the
# local one hack/deps.sh starts, unless SLESS_IMAGE_REPO says otherwise.
# Prints one line per image, "<service> <repo>/<service>@sha256:...", which
# are the chart's image.repository and image.digests.<service>.
#
#   hack/images.sh                 build all five into 127.0.0.1:5001/sless
#   SLESS_IMAGE_REPO=reg/sless SLESS_IMAGE_BASE=reg/static@sha256:... hack/images.sh
#
# The base image is a setting (SLESS_IMAGE_BASE, by digest); without it, a
# minimal one (CA certificates, /tmp, user 65532) is made and pushed to the
# same repository: no image is pulled from outside this machine.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${SLESS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sless}
KO_VERSION=$(awk '$1 == "github.com/google/ko" {print $2}' "$ROOT/hack/tools/ko/go.mod")
KO=$CACHE/ko-$KO_VERSION/ko
REPO=${SLESS_IMAGE_REPO:-127.0.0.1:${SLESS_REGISTRY_PORT:-5001}/sless}
SERVICES=(gateway builder operator invoker scheduler)

say() { printf 'images: %s\n' "$*" >&2; }
die() { printf 'images: ERROR: %s\n' "$*" >&2; exit 1; }

if [ ! -x "$KO" ]; then
	say "building ko $KO_VERSION into $(dirname "$KO") (first time only)"
	start=$SECONDS
	mkdir -p "$(dirname "$KO")"
	(cd "$ROOT/hack/tools/ko" && GOWORK=off CGO_ENABLED=0 go build -trimpath -o "$KO.tmp" github.com/google/ko) >&2 || die "building ko failed"
	mv "$KO.tmp" "$KO"
	say "built ko in $((SECONDS - start))s"
fi

base=${SLESS_IMAGE_BASE:-}
if [ -z "$base" ]; then
	base=$(cd "$ROOT/hack/tools/ko" && GOWORK=off go run ./staticbase -repo "$REPO/static") || die "pushing the base image failed"
fi
[[ $base =~ @sha256:[0-9a-f]{64}$ ]] || die "the base image $base is not pinned by digest"
say "base $base"

cd "$ROOT"
for s in "${SERVICES[@]}"; do
	# -B names the image <repo>/<service>; the tag is the commit, for
	# people; the chart takes the digest. No SBOM: nothing here reads it.
	ref=$(GOWORK=$ROOT/go.work KO_DOCKER_REPO=$REPO KO_DEFAULTBASEIMAGE=$base GOFLAGS=-trimpath \
		"$KO" build -B --sbom=none --platform="linux/$(go env GOARCH)" --tags="$(git rev-parse --short=12 HEAD 2>/dev/null || echo dev)" \
		"./services/$s" 2> >(grep -v -e '^[0-9/: ]*Using base' -e 'Building ' -e 'Publishing ' -e 'Published ' -e 'pushed blob' -e 'existing blob' >&2)) ||
		die "ko build of $s failed"
	[[ $ref =~ ^(.+):[^:/@]+(@sha256:[0-9a-f]{64})$ ]] || die "ko printed $ref for $s, not <repo>:<tag>@<digest>"
	printf '%s %s%s\n' "$s" "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" # the tag dropped: the digest is the name
done
