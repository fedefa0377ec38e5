#!/bin/bash
# reload-memory.sh [BYTES]: the peak resident size (VmHWM) of the real
# binary loading a configuration of one KVM entry with as many hosts as fill
# BYTES (default 16 MiB less one byte, the cap of a configuration file: some
# 260,000 hosts), then reloading it five times with POST /-/reload (twice
# with one host fewer or back, so that the entry is built anew) and once
# with an unknown field in a host, which is refused (docs/scaling.md:
# "Large configurations"). The binary runs with PROVIDER_HEALTH_MEMORY_LIMIT
# at the Deployment's 256 MiB, as deploy/kubernetes sets it.
#
# It runs TestLargeReloadsUnderTheDeploymentLimit, which `make test` runs at
# 16 MiB too and which fails when the peak reaches 256 MiB; this script
# prints the figures of each step. No host is dialled: the hosts are never
# scraped. GO (go) may be set.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
GO=${GO:-go}
BYTES=${1:-$((16 * 1024 * 1024 - 1))}

cd "$root"
PROVIDER_HEALTH_RELOAD_TEST_BYTES=$BYTES "$GO" test -count=1 -timeout 30m \
	-run '^TestLargeReloadsUnderTheDeploymentLimit$' -v ./cmd/provider_health_exporter/ |
	grep -E 'reloadmem_test.go|^(--- |ok|FAIL|PASS)'
