#!/usr/bin/env bash
# Builds Prometheus 3 (prometheus and promtool) from the
# github.com/prometheus/prometheus module into a cache outside the repository,
# so that only the first run on a machine pays the build (10-20 minutes on two
# cores). Debian 12 ships Prometheus 2.42; the end-to-end test and
# `make mixin-test` run against both.
#
# Prometheus publishes its Go module as v0.3XX.Y for release 3.XX.Y. The web UI
# assets are not embedded (no builtinassets tag): the tests use the HTTP API only.
#
# Usage: build-prometheus.sh  -> prints the paths of prometheus and promtool,
# one per line, on stdout.
set -euo pipefail

PROM_VERSION="${PROM_VERSION:-3.16.0}"
IFS=. read -r major minor patch <<<"$PROM_VERSION"
MODULE_VERSION="v0.$((major * 100 + minor)).$patch"
CACHE="${PHE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/provider_health_exporter}"
OUT="$CACHE/prometheus-$PROM_VERSION"

if [[ -x "$OUT/prometheus" && -x "$OUT/promtool" ]]; then
  echo "$OUT/prometheus"
  echo "$OUT/promtool"
  exit 0
fi

GO="${GO:-go}"
work="$CACHE/build-prometheus-$PROM_VERSION"
mkdir -p "$work" "$OUT"
cd "$work"

cat > go.mod <<MOD
module phe/prometheus-build

go 1.26

require github.com/prometheus/prometheus $MODULE_VERSION
MOD
cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
GO

# The same variables Prometheus's promu sets, so that
# prometheus_build_info and `--version` name the release.
ldflags="-s -w
  -X github.com/prometheus/common/version.Version=$PROM_VERSION
  -X github.com/prometheus/common/version.Revision=v$PROM_VERSION
  -X github.com/prometheus/common/version.Branch=HEAD
  -X github.com/prometheus/common/version.BuildUser=provider_health_exporter
  -X github.com/prometheus/common/version.BuildDate=$(date -u +%Y%m%d-%H:%M:%S)"

echo "build-prometheus: building Prometheus $PROM_VERSION (first run only, 10-20 min)" >&2
GOFLAGS=-mod=mod "$GO" get "github.com/prometheus/prometheus@$MODULE_VERSION" >&2
GOFLAGS=-mod=mod "$GO" mod tidy >&2
for cmd in prometheus promtool; do
  CGO_ENABLED=0 GOFLAGS=-mod=mod "$GO" build -trimpath -tags netgo -ldflags "$ldflags" \
    -o "$OUT/$cmd.tmp" "github.com/prometheus/prometheus/cmd/$cmd" >&2
done
# Rename only once both exist, so an interrupted build is redone in full.
mv "$OUT/promtool.tmp" "$OUT/promtool"
mv "$OUT/prometheus.tmp" "$OUT/prometheus"
echo "$OUT/prometheus"
echo "$OUT/promtool"
