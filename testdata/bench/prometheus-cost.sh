#!/bin/bash
# prometheus-cost.sh [REV ...]: what the exporter costs the Prometheus that
# scrapes it (docs/scaling.md: "What it costs your Prometheus"). For each
# revision it builds the exporter, points it at a simulated KVM fleet and has
# the real Prometheus scrape it every INTERVAL for DURATION, then reports
# Prometheus's head series and chunks (prometheus_tsdb_head_series,
# prometheus_tsdb_head_chunks), its resident memory
# (process_resident_memory_bytes) and heap, and the exporter's series per
# host. `make bench-prometheus` runs it.
#
# The fleet is BenchmarkFleet's simulator (lib.sh), answering libvirt's RPCs
# after LATENCY. Every revision scrapes the same fleet, each with a fresh Prometheus and
# TSDB; the fleet and every exporter and Prometheus are stopped by their PID.
#
# REV is a git revision (built from a temporary worktree) or "." (the working
# tree); the default is "$BEFORE ." (BEFORE: 9f2fe66, the last revision that
# exported every reason of the set at 0). PROMETHEUS is the prometheus binary;
# by default Prometheus 3's from testdata/prometheus/build-prometheus.sh
# (built once per machine, 10-20 minutes). HOSTS (1000), INTERVAL (5s),
# DURATION (180, seconds), LATENCY (20ms) and GO (go) may be set.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
GO=${GO:-go}
HOSTS=${HOSTS:-1000}
INTERVAL=${INTERVAL:-5s}
DURATION=${DURATION:-180}
LATENCY=${LATENCY:-20ms}
BEFORE=${BEFORE:-9f2fe66}
[ $# -gt 0 ] || set -- "$BEFORE" .

me=prometheus-cost.sh
# shellcheck source=testdata/bench/lib.sh
. "$here/lib.sh"

PROMETHEUS=${PROMETHEUS:-$("$root/testdata/prometheus/build-prometheus.sh" | sed -n 1p)}
[ -x "$PROMETHEUS" ] || { echo "$me: no prometheus binary at '$PROMETHEUS'" >&2; exit 1; }

# query prints the value of a one-sample PromQL instant query.
query() {
	curl -fsS "http://$prom_addr/api/v1/query" --data-urlencode "query=$1" |
		sed -n 's/.*"value":\[[^,]*,"\([^"]*\)"\].*/\1/p'
}

# metric prints the value of an unlabelled series of a /metrics page.
metric() { awk -v m="$2" '$1 == m { print $2 }' "$1"; }

build_fleet
start_fleet "$HOSTS" 0 "$LATENCY"
echo "$me: $healthy hosts up" >&2

results=()
for rev in "$@"; do
	build_rev "$rev"

	exporter_addr=127.0.0.1:$(freeport)
	"$tmp/exporter" --config.file="$tmp/fleet.yml" --web.listen-address="$exporter_addr" \
		--log.level=error 2>"$tmp/exporter.log" &
	exporter_pid=$!
	pids+=("$exporter_pid")
	waitfor curl -fsS "http://$exporter_addr/-/ready"

	prom_addr=127.0.0.1:$(freeport)
	cat >"$tmp/prometheus.yml" <<-YML
		global:
		  scrape_interval: $INTERVAL
		  scrape_timeout: $INTERVAL
		scrape_configs:
		  - job_name: provider-health
		    static_configs:
		      - targets: ['$exporter_addr']
	YML
	rm -rf "$tmp/data"
	"$PROMETHEUS" --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/data" \
		--web.listen-address="$prom_addr" --log.level=warn 2>"$tmp/prometheus.log" &
	prom_pid=$!
	pids+=("$prom_pid")
	waitfor curl -fsS "http://$prom_addr/-/ready"
	echo "$me: $label: Prometheus scrapes every $INTERVAL for ${DURATION}s" >&2
	sleep "$DURATION"

	curl -fsS "http://$prom_addr/metrics" >"$tmp/prom.metrics"
	curl -fsS "http://$exporter_addr/metrics" >"$tmp/exporter.metrics"
	series=$(metric "$tmp/prom.metrics" prometheus_tsdb_head_series)
	chunks=$(metric "$tmp/prom.metrics" prometheus_tsdb_head_chunks)
	rss=$(metric "$tmp/prom.metrics" process_resident_memory_bytes)
	heap=$(metric "$tmp/prom.metrics" go_memstats_heap_inuse_bytes)
	perhost=$(grep -c 'target="h00000"' "$tmp/exporter.metrics" || true)
	ready=$(query 'sum(provider_health_ready)')
	scrape=$(query 'max_over_time(scrape_duration_seconds[1m])')
	bytes=$(wc -c <"$tmp/exporter.metrics")
	results+=("$(awk -v l="$label" -v ph="$perhost" -v s="$series" -v c="$chunks" -v r="$rss" -v h="$heap" \
		-v rd="$ready" -v sc="$scrape" -v b="$bytes" 'BEGIN {
		printf "%-22s %9s %11.0f %11.0f %8.1f %9.1f %6s %9.3f %10.0f", l, ph, s, c, r / 1048576, h / 1048576, rd, sc, b / 1000 }')")

	stop "$prom_pid"
	stop "$exporter_pid"
done

printf '%-22s %9s %11s %11s %8s %9s %6s %9s %10s\n' revision series/host head-series head-chunks rss-MiB heap-MiB ready scrape-s metrics-KB
printf '%s\n' "${results[@]}"
echo "($HOSTS hosts, scraped every $INTERVAL for ${DURATION}s by $("$PROMETHEUS" --version 2>&1 | head -n 1))"
