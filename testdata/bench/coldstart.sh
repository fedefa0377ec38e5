#!/bin/bash
# coldstart.sh [REV ...]: the cold start of the real binary, measured from
# outside (docs/scaling.md: "Cold start"). For each revision it builds the
# exporter, starts it fresh with default settings in front of a simulated
# KVM fleet and scrapes /metrics SCRAPES times with Prometheus's header
# (X-Prometheus-Scrape-Timeout-Seconds: HEADER), each scrape starting GAP
# seconds after the one before began (0: back to back, the harshest), then
# reports per scrape how many hosts were Ready and how long the answer
# took, and the exporter's CPU and peak resident memory over the run.
# `make bench-coldstart` runs it.
#
# The fleet is BenchmarkFleet's simulator (lib.sh), HUNG percent of its hosts
# accepting TCP and never speaking, every libvirt reply after LATENCY, in a
# process of its own that shares the cores with the exporter. Every revision gets a fresh fleet (no
# connection of an earlier exporter lingers in it); the fleet and the
# exporter are stopped by their PID.
#
# REV is a git revision (built from a temporary worktree) or "." (the
# working tree, the default). HOSTS (5000), HUNG (0), TIMEOUT (the entry's
# timeout, 10s), HEADER (30), GAP (0), SCRAPES (3), LATENCY (20ms), GO (go)
# may be set; PROFILE=dir writes a CPU profile and an execution trace of the
# first two scrapes of each revision there (the exporter runs with
# --web.enable-pprof on loopback).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
GO=${GO:-go}
HOSTS=${HOSTS:-5000}
HUNG=${HUNG:-0}
TIMEOUT=${TIMEOUT:-10s}
HEADER=${HEADER:-30}
GAP=${GAP:-0}
SCRAPES=${SCRAPES:-3}
LATENCY=${LATENCY:-20ms}
PROFILE=${PROFILE:-}
[ $# -gt 0 ] || set -- .

me=coldstart.sh
# shellcheck source=testdata/bench/lib.sh
. "$here/lib.sh"

# cpu prints the user+system CPU seconds a process has used.
cpu() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"; }

build_fleet

printf '%-22s %6s %7s' revision hosts healthy >"$tmp/head"
for i in $(seq "$SCRAPES"); do printf ' %7s %7s' "ready$i" "s$i" >>"$tmp/head"; done
printf ' %9s %9s %8s\n' cpu-s-1+2 cpu-s-all peak-MiB >>"$tmp/head"

results=()
for rev in "$@"; do
	build_rev "$rev"
	start_fleet "$HOSTS" "$HUNG" "$LATENCY" "    timeout: $TIMEOUT"
	echo "$me: $label: $HOSTS hosts ($healthy healthy), header ${HEADER}s, timeout $TIMEOUT, gap ${GAP}s" >&2

	exporter_addr=127.0.0.1:$(freeport)
	flags=()
	[ -z "$PROFILE" ] || flags+=(--web.enable-pprof)
	"$tmp/exporter" --config.file="$tmp/fleet.yml" --web.listen-address="$exporter_addr" \
		"${flags[@]}" --log.level=warn 2>"$tmp/exporter.log" &
	exporter_pid=$!
	pids+=("$exporter_pid")
	waitfor curl -fsS "http://$exporter_addr/-/ready"
	cpu0=$(cpu "$exporter_pid")
	if [ -n "$PROFILE" ]; then
		mkdir -p "$PROFILE"
		secs=$((2 * HEADER > 20 ? 20 : 2 * HEADER))
		base=$PROFILE/coldstart-${label//[^A-Za-z0-9]/_}
		curl -fsS -o "$base.cpu.pprof" "http://$exporter_addr/debug/pprof/profile?seconds=$secs" &
		prof_pid=$!
		# The execution trace says where the dials wait: on the network
		# (go tool trace -pprof=net), on a lock or the dial window
		# (-pprof=sync) or for a CPU (-pprof=sched).
		curl -fsS -o "$base.trace" "http://$exporter_addr/debug/pprof/trace?seconds=$secs" &
		trace_pid=$!
	fi
	line=$(printf '%-22s %6s %7s' "$label" "$HOSTS" "$healthy")
	cpu12=
	for i in $(seq "$SCRAPES"); do
		start=$(date +%s.%N)
		curl -sS -o "$tmp/metrics.$i" -H "X-Prometheus-Scrape-Timeout-Seconds: $HEADER" \
			--max-time $((HEADER + 5)) "http://$exporter_addr/metrics" || true
		end=$(date +%s.%N)
		ready=$(awk '/^provider_health_ready\{/ && $NF == 1 { n++ } END { print n + 0 }' "$tmp/metrics.$i")
		line+=$(awk -v r="$ready" -v s="$start" -v e="$end" 'BEGIN { printf " %7d %7.2f", r, e - s }')
		[ "$i" != 2 ] || cpu12=$(awk -v a="$(cpu "$exporter_pid")" -v b="$cpu0" 'BEGIN { printf "%.2f", a - b }')
		if [ "$i" -lt "$SCRAPES" ] && [ "$GAP" != 0 ]; then
			sleep "$(awk -v g="$GAP" -v s="$start" -v now="$(date +%s.%N)" 'BEGIN { d = s + g - now; print (d > 0 ? d : 0) }')"
		fi
	done
	cpuall=$(awk -v a="$(cpu "$exporter_pid")" -v b="$cpu0" 'BEGIN { printf "%.2f", a - b }')
	peak=$(awk '/^VmHWM:/ { printf "%.0f", $2 / 1024 }' "/proc/$exporter_pid/status")
	line+=$(printf ' %9s %9s %8s' "${cpu12:--}" "$cpuall" "$peak")
	results+=("$line")
	# The profile covers the first two scrapes (at most 20 s): wait for it.
	[ -z "$PROFILE" ] || wait "$prof_pid" || echo "$me: the CPU profile failed" >&2
	[ -z "$PROFILE" ] || wait "$trace_pid" || echo "$me: the execution trace failed" >&2
	stop "$exporter_pid"
	stop_fleet
done

cat "$tmp/head"
printf '%s\n' "${results[@]}"
echo "($HOSTS hosts, $HUNG% hung, $LATENCY per libvirt reply, entry timeout $TIMEOUT, header ${HEADER}s, gap ${GAP}s; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at the end)"
