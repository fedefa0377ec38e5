#!/bin/bash
# schedule-rows.sh [file]: issue 52's table through the real binary under
# the Deployment's memory limit (docs/scaling.md: "The fit's rows through
# the real binary under 256 MiB"). The exporter runs in a cgroup v1 memory
# cgroup of 256 MiB, with PROVIDER_HEALTH_MEMORY_LIMIT set to it as
# deploy/kubernetes sets it from the downward API, in front of
# testdata/bench/kubestandin, a stand-in API server that writes each row's
# cluster object by object (it runs outside the cgroup). Each row is
# checked by scraping /metrics and reading /api/v1/status:
#
#   1. 1,000 Nodes, 20,000 bound Pods with a required anti-affinity term
#      each, one bound Pod changing every 100 ms; the template a proxy with
#      a zone spread (DoNotSchedule): the exporter's CPU per scrape with
#      1 entry, 8 entries of one template and 8 of distinct templates,
#      and its memory;
#   2. the same cluster where nothing fits (the template's anti-affinity
#      per zone to every bound Pod), an entry of timeout 1s beside one of
#      15s, min_interval 10s (and one of 100 ms, which the fit often
#      overruns): the short one must never be Ready;
#   3. 100 Nodes of 1,000 pod slots in 3 zones, a zone spread with
#      maxSkew 1, no quota: the exact count, 99,001, inside 10 s;
#   4. row 1's cluster and 20,000 Namespaces of 20 KiB, the template with
#      a namespaceSelector term: no OOM;
#   5. 100 Pending Pods of 16,000 labels (1.4 MB each), sent by a stand-in
#      that ignores the watch's spec.nodeName!= selector, and one bound Pod
#      with 200 labels: no OOM, and that Pod's node not judged, named.
#
# Between two measured scrapes one bound Pod changes (the stand-in's
# POST /churn sends one watch event), as on a live cluster, so no scrape
# reuses the last one's fit; row 1 is also measured with a Pod changing
# every 100 ms (10 events a second), where entries that start their fits
# a few events apart cannot share them.
#
# It prints a table and Go benchmark lines (benchstat reads them), which it
# appends to file, and a FAIL line there for each row that does not behave
# as the table's last column says (an OOM kill, a short entry Ready where
# nothing fits, a count other than 99,001, the over-bound Pod's node not
# named); it then exits 1. Row 1's CPU targets are not judged: on a shared
# machine they are read, not asserted. Not root, or no cgroup v1 memory controller: it says so
# and exits 0. Every process it starts is stopped by its PID and the cgroup
# removed when it ends. ROWS (default "1 2 3 4 5") selects rows; ROWS_REPEAT (default 3) is how many times each
# CPU measurement is repeated, ROWS_SCRAPES (default 10) the scrapes of
# each.
set -euo pipefail

me=schedule-rows.sh
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
GO=${GO:-go}
out=${1:-/dev/null}
repeat=${ROWS_REPEAT:-3}
scrapes=${ROWS_SCRAPES:-10}
rows=${ROWS:-1 2 3 4 5}
limit=268435456 # the Deployment's limits.memory, 256Mi
cgroot=/sys/fs/cgroup/memory

skip() {
	echo "$me: skipped: $*"
	exit 0
}
[ "$(id -u)" = 0 ] || skip "not root (a memory cgroup needs root)"
[ -f "$cgroot/memory.limit_in_bytes" ] && [ -w "$cgroot" ] || skip "no writable cgroup v1 memory controller at $cgroot"
for tool in curl jq; do
	command -v "$tool" >/dev/null || skip "$tool not found"
done

tmp=$(mktemp -d /tmp/phe-schedule-rows.XXXXXX)
cg=$cgroot/phe-schedule-rows-$$
pids=()
cleanup() {
	rc=$?
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	[ -d "$cg" ] && rmdir "$cg" 2>/dev/null || true
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
		# Below Linux's ephemeral range (32768 and up by default), where
		# a connection's own end may hold a port no listener shows.
		p=$((20000 + RANDOM % 12000))
		(echo >"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
	done
}

echo "$me: building the exporter and the stand-in API server"
(cd "$root" && "$GO" build -o "$tmp/exporter" ./cmd/provider_health_exporter && "$GO" build -o "$tmp/standin" ./testdata/bench/kubestandin)
ticks=$(getconf CLK_TCK)

# standin ARGS...: starts the stand-in API server for a row and writes
# the kubeconfig that reaches it (plain HTTP, no credentials).
standin_pid=
standin() {
	rm -f "$tmp/addr"
	"$tmp/standin" -addr-file "$tmp/addr" "$@" 2>"$tmp/standin.log" &
	standin_pid=$!
	pids+=("$standin_pid")
	for _ in $(seq 100); do [ -s "$tmp/addr" ] && break; sleep 0.1; done
	[ -s "$tmp/addr" ] || { echo "$me: the stand-in did not start" >&2; cat "$tmp/standin.log" >&2; exit 1; }
	cat >"$tmp/kubeconfig" <<-KC
		apiVersion: v1
		kind: Config
		clusters: [{name: standin, cluster: {server: "http://$(cat "$tmp/addr")"}}]
		users: [{name: anonymous, user: {}}]
		contexts: [{name: standin, context: {cluster: standin, user: anonymous}}]
		current-context: standin
	KC
}

# template FILE KIND [LABEL]: a proxy Pod of 500m and 256Mi with a zone
# spread (DoNotSchedule); KIND adds what the row needs: "none" nothing,
# "antizone" required anti-affinity per zone to every bound Pod (nothing
# fits), "small" 10m and 16Mi (1,000 fit a Node of row 3), "nsselector"
# a required anti-affinity term with a namespaceSelector. LABEL is a
# team label that makes the template distinct.
template() {
	local file=$1 kind=$2 team=${3:-} cpu=500m mem=256Mi extra=
	case $kind in
	small) cpu=10m mem=16Mi ;;
	antizone) extra='  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - labelSelector: {matchLabels: {app.kubernetes.io/name: app}}
          namespaces: [apps]
          topologyKey: topology.kubernetes.io/zone' ;;
	nsselector) extra='  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - labelSelector: {matchLabels: {app: proxy}}
          namespaceSelector: {matchLabels: {team: proxies}}
          topologyKey: kubernetes.io/hostname' ;;
	esac
	cat >"$file" <<-T
		apiVersion: v1
		kind: Pod
		metadata:
		  generateName: egress-proxy-
		  namespace: proxies
		  labels: {app: proxy${team:+, team: $team}}
		spec:
		  containers:
		    - name: proxy
		      image: registry.example/egress-proxy:1.4.2
		      resources:
		        requests: {cpu: $cpu, memory: $mem}
		        limits: {cpu: $cpu, memory: $mem}
		  topologySpreadConstraints:
		    - maxSkew: 1
		      topologyKey: topology.kubernetes.io/zone
		      whenUnsatisfiable: DoNotSchedule
		      labelSelector: {matchLabels: {app: proxy}}
		$extra
	T
}

# entry NAME TEMPLATE [TIMEOUT [MIN_INTERVAL]]: one kubernetes entry.
entry() {
	cat <<-E
		  - name: $1
		    kubeconfig: $tmp/kubeconfig
		    namespace: proxies
		    pod_template: $2
		    schedule: true
		    timeout: ${3:-10s}
		    min_interval: ${4:-0s}
	E
}

# exporter CONFIG: starts the exporter in a fresh memory cgroup of 256 MiB;
# exp_pid and port are its PID and port.
exp_pid=
port=
exporter() {
	mkdir "$cg"
	echo "$limit" >"$cg/memory.limit_in_bytes"
	# No escape into swap, where the kernel allows it to be bounded.
	[ -w "$cg/memory.memsw.limit_in_bytes" ] && echo "$limit" >"$cg/memory.memsw.limit_in_bytes" 2>/dev/null || true
	port=$(freeport)
	PROVIDER_HEALTH_MEMORY_LIMIT=$limit bash -c 'echo $$ >"$1/cgroup.procs" && exec "$2" --config.file="$3" --web.listen-address="127.0.0.1:$4" --log.level=warn' \
		_ "$cg" "$tmp/exporter" "$1" "$port" 2>"$tmp/exporter.log" &
	exp_pid=$!
	pids+=("$exp_pid")
	for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/-/ready" >/dev/null 2>&1 && return 0; sleep 0.1; done
	echo "$me: the exporter did not start" >&2
	cat "$tmp/exporter.log" >&2
	exit 1
}

# exporter_stop stops the exporter and removes its cgroup; it says how
# the process ended and what the cgroup saw.
exporter_stop() {
	local ooms
	ooms=$(awk '$1 == "oom_kill" {print $2}' "$cg/memory.oom_control")
	cg_peak=$(cat "$cg/memory.max_usage_in_bytes")
	cg_failcnt=$(cat "$cg/memory.failcnt")
	cg_ooms=${ooms:-0}
	if kill -0 "$exp_pid" 2>/dev/null; then
		exp_end=alive
	else
		exp_end=dead
	fi
	stop "$exp_pid"
	for _ in $(seq 50); do [ -s "$cg/cgroup.procs" ] || break; sleep 0.1; done
	rmdir "$cg"
}

# The exporter's CPU ticks and memory figures; 0 once it is gone.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$exp_pid/stat" 2>/dev/null || echo 0; }
mem_kb() { awk -v k="$1:" '$1 == k {print $2}' "/proc/$exp_pid/status" 2>/dev/null || echo 0; }

# scrape: one scrape of /metrics, as Prometheus would, waiting for every
# check; false when the exporter is gone.
scrape() {
	curl -fs -o "$tmp/metrics" -H 'X-Prometheus-Scrape-Timeout-Seconds: 30' "http://127.0.0.1:$port/metrics"
}

# verdicts: NAME REASON CAPACITY MESSAGE per target, from /api/v1/status.
verdicts() {
	curl -fs "http://127.0.0.1:$port/api/v1/status" |
		jq -r '.providers[] | select(.provider == "kubernetes") | .name as $n | .targets[] | "\($n)\t\(.reason)\t\(.capacity // "-")\t\(.durationSeconds // "-")\t\(.message)"'
}

# all_settled: every entry's verdict is past the watches' filling.
all_settled() {
	scrape || return 2
	! verdicts | awk -F'\t' '$2 == "" || $2 == "Unknown" || $2 == "null" {bad = 1} END {exit !bad}'
}

settle() {
	local i rc
	for i in $(seq 60); do
		rc=0
		all_settled || rc=$?
		[ "$rc" = 0 ] && return 0
		[ "$rc" = 2 ] && return 1
		sleep 1
	done
	return 1
}

# churn: one bound Pod changes (one watch event), then a pause for the
# exporter to apply it.
churn() {
	curl -fs -X POST "http://$(cat "$tmp/addr")/churn"
	sleep 0.3
}

# measure N CHURN: N scrapes, each after a churn when CHURN is yes; sets
# cpu_ns (CPU per scrape), wall_ns (wall time per scrape, the pauses not
# counted), rss and hwm; gcs (the garbage collector's cycles per scrape)
# and heap (the Go heap allocated at the last scrape), from the
# exporter's own metrics.
measure() {
	local n=$1 c0 c1 t0 t1 wall=0 g0=
	c0=$(cpu_ticks)
	for _ in $(seq "$n"); do
		[ "$2" = yes ] && churn
		t0=$(date +%s%N)
		scrape || { echo "$me: the exporter did not answer a scrape" >&2; break; }
		t1=$(date +%s%N)
		wall=$((wall + t1 - t0))
		[ -n "$g0" ] || g0=$(gometric go_gc_duration_seconds_count)
	done
	c1=$(cpu_ticks)
	gcs=0
	[ "$n" -gt 1 ] && gcs=$(awk -v a="$g0" -v b="$(gometric go_gc_duration_seconds_count)" -v n="$n" 'BEGIN {printf "%.1f", (b - a) / (n - 1)}')
	heap=$(gometric go_memstats_heap_alloc_bytes)
	cpu_ns=$(((c1 - c0) * 1000000000 / ticks / n))
	wall_ns=$((wall / n))
	rss=$(($(mem_kb VmRSS) * 1024))
	hwm=$(($(mem_kb VmHWM) * 1024))
}

range_ms() {
	local lo hi
	lo=$(printf '%s\n' "$@" | sort -n | head -1)
	hi=$(printf '%s\n' "$@" | sort -n | tail -1)
	echo "$((lo / 1000000))-$((hi / 1000000)) ms"
}

# gometric NAME: the value of the exporter's own metric NAME in the last
# scrape.
gometric() { awk -v m="$1" '$1 == m {printf "%.0f\n", $2}' "$tmp/metrics"; }

want() { [[ " $rows " == *" $1 "* ]]; }

bench() { printf '%s\n' "$*" | tee -a "$out"; }

# fail records a row that does not behave as issue 52's table says: a
# FAIL line in file (make bench fails on it) and the script's status.
failed=0
fail() {
	bench "FAIL: $me: $*"
	failed=1
}
# no_oom ROW: fails ROW when the cgroup's OOM killer acted or the
# exporter was gone before it was stopped.
no_oom() {
	[ "$cg_ooms" = 0 ] && [ "$exp_end" = alive ] || fail "row $1: exporter $exp_end, $cg_ooms OOM kills in its 256 MiB cgroup"
}
table=()
row() { table+=("$(printf '%s\t%s\t%s' "$1" "$2" "$3")"); }

mib() { awk -v b="$1" 'BEGIN {printf "%.0f MiB", b / 1048576}'; }

# ---- row 1 -----------------------------------------------------------------
row1() {
	local events=$1 shape i cfg cpus
	for shape in entries=1 entries=8/same entries=8/distinct; do
		cfg=$tmp/row1.yml
		echo "kubernetes:" >"$cfg"
		case $shape in
		entries=1) template "$tmp/t0.yaml" none; entry e0 "$tmp/t0.yaml" >>"$cfg" ;;
		entries=8/same) template "$tmp/t0.yaml" none; for i in $(seq 0 7); do entry "e$i" "$tmp/t0.yaml" >>"$cfg"; done ;;
		entries=8/distinct) for i in $(seq 0 7); do template "$tmp/t$i.yaml" none "team-$i"; entry "e$i" "$tmp/t$i.yaml" >>"$cfg"; done ;;
		esac
		exporter "$cfg"
		if ! settle; then
			echo "$me: row 1 $shape: the entries never settled" >&2
			verdicts >&2 || true
		fi
		verdicts | head -1 | cut -f2- | cut -c1-200 || true
		cpus=()
		for _ in $(seq "$repeat"); do
			if [ "$events" = per-scrape ]; then measure "$scrapes" yes; else measure "$scrapes" no; fi
			cpus+=("$cpu_ns")
			bench "BenchmarkRow1CPUPerScrape/events=$events/$shape 	$scrapes	$wall_ns ns/op	$cpu_ns cpu-ns/scrape	$gcs gc/scrape	$heap heap-bytes	$rss rss-bytes	$hwm hwm-bytes"
		done
		reasons=$(verdicts | cut -f2 | sort | uniq -c | tr -s ' ' | tr '\n' ' ') || true
		exporter_stop
		no_oom 1
		row "1 $events $shape" "CPU/scrape $(range_ms "${cpus[@]}"), $gcs GC/scrape; heap $(mib "$heap"), VmHWM $(mib "$hwm"), cgroup peak $(mib "$cg_peak")" "verdicts:${reasons}exporter $exp_end, OOM kills $cg_ooms"
	done
}

if want 1; then
	echo "$me: row 1: 1,000 Nodes, 20,000 bound Pods with a term each, zone spread; one event per scrape"
	standin -nodes 1000 -bound-pods 20000
	row1 per-scrape
	stop "$standin_pid"
	echo "$me: row 1: the same, one event every 100 ms"
	standin -nodes 1000 -bound-pods 20000 -churn 100ms
	row1 10/s
	stop "$standin_pid"
fi

# ---- row 2 -----------------------------------------------------------------
# shared: both entries fit one template (the fast one may take the slow
# one's fit); own: the templates differ, each entry fits on its own; cut:
# own, with a budget of 100 ms, about what the fit takes on a loaded
# machine, so that some fits are cut.
if want 2; then
	echo "$me: row 2: nothing fits, timeout 1s beside 15s, min_interval 10s"
	standin -nodes 1000 -bound-pods 20000
	for shape in shared own cut; do
		fast_timeout=1s
		[ "$shape" = cut ] && fast_timeout=100ms
		cfg=$tmp/row2.yml
		template "$tmp/t1s.yaml" antizone
		if [ "$shape" = shared ]; then cp "$tmp/t1s.yaml" "$tmp/t15s.yaml"; else template "$tmp/t15s.yaml" antizone other; fi
		{ echo "kubernetes:"; entry fast "$tmp/t1s.yaml" "$fast_timeout" 10s; entry slow "$tmp/t15s.yaml" 15s 10s; } >"$cfg"
		exporter "$cfg"
		: >"$tmp/row2.log"
		for i in $(seq 12); do
			churn
			scrape || break
			ready=$(awk '/^provider_health_ready\{/ && /name="fast"/ {print $NF}' "$tmp/metrics")
			verdicts | awk -F'\t' -v i="$i" -v r="$ready" '{printf "scrape %2d %-4s %-14s capacity %-5s %5ss %s\n", i, $1, $2, $3, $4, substr($5, 1, 110)} $1 == "fast" {print "          fast provider_health_ready " r}' | tee -a "$tmp/row2.log" || true
			sleep 1.5
		done
		fast=$(awk '$3 == "fast" {print $4}' "$tmp/row2.log" | sort | uniq -c | tr -s ' ' | tr '\n' ' ')
		slow=$(awk '$3 == "slow" {print $4}' "$tmp/row2.log" | sort | uniq -c | tr -s ' ' | tr '\n' ' ')
		fast_ready=$(awk '$3 == "fast" && $4 == "Ready" {n++} /fast provider_health_ready 1/ {n++} END {print n + 0}' "$tmp/row2.log")
		exporter_stop
		no_oom 2
		[ "$fast_ready" = 0 ] || fail "row 2 $shape: the entry of $fast_timeout was Ready $fast_ready times where nothing fits"
		row "2 $shape (fast $fast_timeout)" "fast:${fast}; slow (15s):${slow}" "fast Ready $fast_ready times; exporter $exp_end, OOM kills $cg_ooms"
		bench "BenchmarkRow2FastReady/$shape 	1	$fast_ready ready-verdicts"
	done
	stop "$standin_pid"
fi

# ---- row 3 -----------------------------------------------------------------
# The bound Pod that changes before each scrape is on a Node without a
# zone, which the spread leaves out: the count stays 99,001.
if want 3; then
	echo "$me: row 3: 100 Nodes x 1,000 slots, zone spread, budget 10s"
	standin -nodes 100 -node-pods 1000 -node-cpu 64 -node-memory 256Gi -bound-pods 1 -spare-node
	template "$tmp/t3.yaml" small
	cfg=$tmp/row3.yml
	{ echo "kubernetes:"; entry count "$tmp/t3.yaml" 10s; } >"$cfg"
	exporter "$cfg"
	settle || true
	counts=()
	for _ in $(seq "$repeat"); do
		measure 1 yes
		IFS=$'\t' read -r _ reason capacity duration message < <(verdicts) || true
		echo "  $reason capacity $capacity in ${duration}s: ${message:0:200}"
		[ "$reason/$capacity" = Ready/99001 ] || fail "row 3: $reason, capacity $capacity, want Ready 99001 within 10s: ${message:0:300}"
		counts+=("$reason/$capacity/${duration:0:5}s")
		bench "BenchmarkRow3SpreadCount 	1	$wall_ns ns/op	$cpu_ns cpu-ns/scrape	${capacity//-/0} copies	$hwm hwm-bytes"
	done
	exporter_stop
	stop "$standin_pid"
	no_oom 3
	row "3 spread count" "${counts[*]}; VmHWM $(mib "$hwm"), cgroup peak $(mib "$cg_peak")" "want Ready/99001 within 10s; exporter $exp_end, OOM kills $cg_ooms"
fi

# ---- row 4 -----------------------------------------------------------------
if want 4; then
	echo "$me: row 4: 20,000 Namespaces of 20 KiB, a namespaceSelector term"
	standin -nodes 1000 -bound-pods 20000 -namespaces 20000 -namespace-bytes 20480
	template "$tmp/t4.yaml" nsselector
	cfg=$tmp/row4.yml
	{ echo "kubernetes:"; entry nsterm "$tmp/t4.yaml" 15s; } >"$cfg"
	exporter "$cfg"
	seen=
	settled=0
	for i in $(seq 30); do
		scrape || { echo "  scrape $i: the exporter is gone"; break; }
		IFS=$'\t' read -r _ reason capacity duration message < <(verdicts) || true
		echo "  scrape $i: $reason capacity $capacity ${duration:0:5}s RSS $(mib $(($(mem_kb VmRSS) * 1024))), cgroup $(mib "$(cat "$cg/memory.usage_in_bytes")"): ${message:0:140}"
		seen="$reason ${message:0:100}"
		[ "$reason" != Unknown ] && [[ $message != *"still filling"* ]] && settled=$((settled + 1))
		[ "$settled" -ge 3 ] && break
		sleep 1
	done
	hwm=0
	kill -0 "$exp_pid" 2>/dev/null && hwm=$(($(mem_kb VmHWM) * 1024))
	exporter_stop
	stop "$standin_pid"
	bench "BenchmarkRow4Namespaces 	1	$hwm hwm-bytes	$cg_peak cgroup-peak-bytes	$cg_ooms oom-kills"
	no_oom 4
	row "4 namespaces" "after $i scrapes: $seen" "VmHWM $(mib "$hwm"), cgroup peak $(mib "$cg_peak"); exporter $exp_end, OOM kills $cg_ooms"
fi

# ---- row 5 -----------------------------------------------------------------
if want 5; then
	echo "$me: row 5: 100 Pending Pods of 16,000 labels, a bound Pod over the bounds"
	standin -nodes 100 -bound-pods 2000 -pending-pods 100 -pending-labels 16000 -over-bound-pods 1 -ignore-field-selector
	template "$tmp/t5.yaml" none
	cfg=$tmp/row5.yml
	{ echo "kubernetes:"; entry labels "$tmp/t5.yaml" 15s; } >"$cfg"
	exporter "$cfg"
	settle || true
	IFS=$'\t' read -r _ reason capacity duration message < <(verdicts) || true
	echo "  $reason capacity $capacity: ${message:0:400}"
	hwm=0
	kill -0 "$exp_pid" 2>/dev/null && hwm=$(($(mem_kb VmHWM) * 1024))
	named=no
	[[ $message == *huge-labels-0* ]] && named=yes
	exporter_stop
	stop "$standin_pid"
	bench "BenchmarkRow5PendingLabels 	1	$hwm hwm-bytes	$cg_peak cgroup-peak-bytes	$cg_ooms oom-kills"
	no_oom 5
	[ "$named" = yes ] || fail "row 5: the node of the bound Pod over the bounds is not named as not judged: $reason ${message:0:300}"
	row "5 pending labels" "$reason capacity $capacity; over-bound Pod named: $named" "VmHWM $(mib "$hwm"), cgroup peak $(mib "$cg_peak"); exporter $exp_end, OOM kills $cg_ooms"
fi

echo
printf '%-34s  %s\n' "row" "measured"
for r in "${table[@]}"; do
	IFS=$'\t' read -r a b c <<<"$r"
	printf '%-34s  %s\n%-34s  %s\n' "$a" "$b" "" "$c"
done
exit "$failed"
