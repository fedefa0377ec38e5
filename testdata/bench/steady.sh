#!/bin/bash
# steady.sh [REV ...]: the steady scrape of the real binary in front of the
# simulated KVM fleet, measured from outside (docs/scaling.md: "What a kind
# costs a replica that does not use it"). For each revision it builds the
# exporter, starts it with PROVIDER_HEALTH_MEMORY_LIMIT=LIMIT (as the
# Deployment does) in front of a fresh fleet, reads its resident memory
# idle (before the first scrape), scrapes /metrics WARM times, then
# SCRAPES times back to back, and reports per steady scrape the CPU
# (user + system, from /proc) of the exporter and of the fleet's process,
# their ratio, and the resident memory after the steady scrapes, split into
# anonymous pages (heap, stacks) and pages of the binary's file.
#
# CPU time, not wall time: the figures hold on a loaded machine better
# than wall times do, but a loaded machine still moves them by about 10%;
# the ratio to the fleet's own CPU, which answers the same calls, moves
# less. Run the revisions in both orders, twice.
#
# REV is a git revision (built from a temporary worktree) or "." (the
# working tree, the default). HOSTS (1000), WARM (5), SCRAPES (50), HEADER
# (5), LIMIT (268435456, the default Deployment's 256Mi), LATENCY (20ms),
# GO (go) may be set.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
GO=${GO:-go}
HOSTS=${HOSTS:-1000}
WARM=${WARM:-5}
SCRAPES=${SCRAPES:-50}
HEADER=${HEADER:-5}
LIMIT=${LIMIT:-268435456}
LATENCY=${LATENCY:-20ms}
[ $# -gt 0 ] || set -- .

me=steady.sh
# shellcheck source=testdata/bench/lib.sh
. "$here/lib.sh"

# cpu prints the user+system CPU seconds a process has used.
cpu() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.3f", ($14 + $15) / hz }' "/proc/$1/stat"; }
# mem prints a field of /proc/PID/status in MiB.
mem() { awk -v k="$2:" '$1 == k { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }
# scrape scrapes the exporter N times back to back.
scrape() {
	for _ in $(seq "$1"); do
		curl -sS -o "$tmp/metrics" -H "X-Prometheus-Scrape-Timeout-Seconds: $HEADER" \
			--max-time $((HEADER + 5)) "http://$exporter_addr/metrics" || true
	done
}

build_fleet

results=()
for rev in "$@"; do
	build_rev "$rev"
	start_fleet "$HOSTS" 0 "$LATENCY"
	exporter_addr=127.0.0.1:$(freeport)
	PROVIDER_HEALTH_MEMORY_LIMIT=$LIMIT "$tmp/exporter" --config.file="$tmp/fleet.yml" \
		--web.listen-address="$exporter_addr" --log.level=warn 2>"$tmp/exporter.log" &
	exporter_pid=$!
	pids+=("$exporter_pid")
	waitfor curl -fsS "http://$exporter_addr/-/ready"
	sleep 3
	idle=$(mem "$exporter_pid" VmRSS)
	scrape "$WARM"
	e0=$(cpu "$exporter_pid") f0=$(cpu "$fleet_pid")
	scrape "$SCRAPES"
	e1=$(cpu "$exporter_pid") f1=$(cpu "$fleet_pid")
	ready=$(awk '/^provider_health_ready\{/ && $NF == 1 { n++ } END { print n + 0 }' "$tmp/metrics")
	results+=("$(awk -v l="$label" -v e0="$e0" -v e1="$e1" -v f0="$f0" -v f1="$f1" -v n="$SCRAPES" -v r="$ready" \
		-v idle="$idle" -v rss="$(mem "$exporter_pid" VmRSS)" -v anon="$(mem "$exporter_pid" RssAnon)" -v file="$(mem "$exporter_pid" RssFile)" \
		'BEGIN { e = (e1 - e0) * 1000 / n; f = (f1 - f0) * 1000 / n
			printf "%-22s %6d %7.1f %7.1f %6.2f %8.1f %8.1f %8.1f %8.1f", l, r, e, f, (f > 0 ? e / f : 0), idle, rss, anon, file }')")
	stop "$exporter_pid"
	stop_fleet
done

printf '%-22s %6s %7s %7s %6s %8s %8s %8s %8s\n' revision ready cpu-ms fleet-ms ratio idle-MiB rss-MiB anon-MiB file-MiB
printf '%s\n' "${results[@]}"
echo "($HOSTS hosts, $LATENCY per libvirt reply, $WARM warm-up scrapes, $SCRAPES steady ones back to back, header ${HEADER}s, PROVIDER_HEALTH_MEMORY_LIMIT=$LIMIT; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at the end)"
