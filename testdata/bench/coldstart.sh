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
# The fleet is BenchmarkFleet's simulator (collector/kvm/fleet_bench_test.go:
# the kvm test binary run with KVM_FLEET_HOSTS): one in-process SSH server per
# host on its own 127.0.0.1 port, HUNG percent of them accepting TCP and never
# speaking, every libvirt reply after LATENCY, in a process of its own that
# shares the cores with the exporter. Every revision gets a fresh fleet (no
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

for b in curl ssh-keygen git awk; do
	command -v "$b" >/dev/null || { echo "coldstart.sh: $b not found" >&2; exit 1; }
done
# The fleet's sockets and the exporter's connections: two descriptors a host
# on each side.
ulimit -n 20000 2>/dev/null || ulimit -n "$(ulimit -Hn)"

tmp=$(mktemp -d /tmp/phe-coldstart.XXXXXX)
pids=()
worktrees=()
cleanup() {
	rc=$?
	exec 3>&- 2>/dev/null || true
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	for w in "${worktrees[@]}"; do git -C "$root" worktree remove --force "$w" 2>/dev/null || true; done
	rm -rf "$tmp"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# stop ends one process this script started, by its PID.
stop() {
	kill "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
	local keep=()
	for p in "${pids[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
	pids=("${keep[@]}")
}

freeport() {
	local p
	while :; do
		p=$((20000 + RANDOM % 20000))
		(echo >"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
	done
}

waitfor() {
	for _ in $(seq 300); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
	echo "coldstart.sh: timed out waiting for: $*" >&2
	return 1
}

# cpu prints the user+system CPU seconds a process has used.
cpu() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"; }

echo "coldstart.sh: building the fleet simulator" >&2
(cd "$root" && "$GO" test -c -o "$tmp/kvm.test" ./collector/kvm/)
ssh-keygen -q -t ed25519 -N '' -C coldstart -f "$tmp/id_ed25519"

# startfleet starts a fresh fleet and writes its configuration.
startfleet() {
	rm -f "$tmp/fleet.in" "$tmp/fleet.out"
	mkfifo "$tmp/fleet.in"
	KVM_FLEET_HOSTS=$HOSTS KVM_FLEET_HUNG=$HUNG KVM_FLEET_LATENCY=$LATENCY \
		KVM_FLEET_KEY="$(cat "$tmp/id_ed25519.pub")" \
		"$tmp/kvm.test" -test.run='^$' <"$tmp/fleet.in" >"$tmp/fleet.out" 2>"$tmp/fleet.err" &
	fleet_pid=$!
	pids+=("$fleet_pid")
	# The fleet serves until its stdin closes: fd 3 holds it open.
	exec 3>"$tmp/fleet.in"
	waitfor grep -qx ready "$tmp/fleet.out"
	socket=$(awk '$1 == "socket" { print $2 }' "$tmp/fleet.out")
	awk '$1 == "host" { $1 = $2 = $3 = ""; sub(/^ +/, ""); print }' "$tmp/fleet.out" >"$tmp/known_hosts"
	# The known_hosts file is not brand new at the cold start, as on a
	# real machine.
	touch -d '-1 hour' "$tmp/known_hosts"
	{
		echo "kvm:"
		echo "  - name: fleet"
		echo "    user: proxyops"
		echo "    timeout: $TIMEOUT"
		echo "    private_key_file: $tmp/id_ed25519"
		echo "    known_hosts_file: $tmp/known_hosts"
		echo "    libvirt_socket: $socket"
		echo "    hosts:"
		awk '$1 == "host" { printf "      - name: h%05d\n        address: %s\n", n++, $3 }' "$tmp/fleet.out"
	} >"$tmp/fleet.yml"
	healthy=$(grep -c '^host ok' "$tmp/fleet.out" || true)
}

stopfleet() {
	exec 3>&-
	stop "$fleet_pid"
}

printf '%-22s %6s %7s' revision hosts healthy >"$tmp/head"
for i in $(seq "$SCRAPES"); do printf ' %7s %7s' "ready$i" "s$i" >>"$tmp/head"; done
printf ' %9s %9s %8s\n' cpu-s-1+2 cpu-s-all peak-MiB >>"$tmp/head"

results=()
for rev in "$@"; do
	label=$rev
	src=$root
	if [ "$rev" = . ]; then
		label="$(git -C "$root" rev-parse --short HEAD)+worktree"
	else
		src=$tmp/src-$rev
		git -C "$root" worktree add -q --detach "$src" "$rev"
		worktrees+=("$src")
	fi
	echo "coldstart.sh: building the exporter at $label" >&2
	(cd "$src" && "$GO" build -o "$tmp/exporter" ./cmd/provider_health_exporter)
	startfleet
	echo "coldstart.sh: $label: $HOSTS hosts ($healthy healthy), header ${HEADER}s, timeout $TIMEOUT, gap ${GAP}s" >&2

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
	[ -z "$PROFILE" ] || wait "$prof_pid" || echo "coldstart.sh: the CPU profile failed" >&2
	[ -z "$PROFILE" ] || wait "$trace_pid" || echo "coldstart.sh: the execution trace failed" >&2
	stop "$exporter_pid"
	stopfleet
done

cat "$tmp/head"
printf '%s\n' "${results[@]}"
echo "($HOSTS hosts, $HUNG% hung, $LATENCY per libvirt reply, entry timeout $TIMEOUT, header ${HEADER}s, gap ${GAP}s; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at the end)"
