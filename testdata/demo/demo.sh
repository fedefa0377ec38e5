#!/bin/bash
# make demo: the exporter on :9877 with an entry of each kind that is Ready
# and others that are not, for a reason a user meets, all on this machine
# (docs/configuration.md: "Demo"). As root on Debian 12:
#
#   - kvm: a real sshd and libvirtd with a running `dir` pool (testdata/kvm/ctl.sh):
#     kvm-lab Ready (with a capacity), kvm-pool-full PoolFull (min_pool_available above the
#     pool, capacity 0), kvm-promised Ready with capacity 2 bound by the memory promised to
#     a defined, shut-off domain, kvm-host-key HostKeyMismatch (known_hosts holds another key);
#   - gcp: compute-standin (testdata/demo/compute-standin), a loopback
#     STAND-IN of the Compute API serving the bodies recorded from the real
#     API under testdata/gcp/, not Google: gcp-standin Ready (capacity 2),
#     gcp-standin-quota QuotaExhausted, gcp-standin-disabled APIDisabled;
#   - kubernetes: a real kube-apiserver and etcd (testdata/kubernetes/ctl.sh,
#     the binary of build-apiserver.sh, cached as make test caches it), started
#     in the background by testdata/demo/kubernetes.sh, whose entries join by a
#     reload when it answers: kube-demo Ready (capacity 17 from a ResourceQuota whose
#     usage the demo writes itself: no quota controller runs), kube-demo-can-i Forbidden,
#     kube-demo-unschedulable Unschedulable, kube-demo-proxies Ready with
#     capacity 2, one per node (on three synthetic Nodes), and kube-demo-zones
#     Ready with capacity 112 in three zones, whose capacity after losing
#     demo-zone-a is -2 (three more synthetic Nodes, one per zone). Where
#     kube-apiserver is not built yet it is built in the background first;
#     the other kinds do not wait for it.
#
# It scrapes /metrics every DEMO_SCRAPE_INTERVAL seconds (10), as Prometheus
# would, and prints each target's reason when it changes. Ctrl-C (or TERM)
# stops everything it started, each by its PID (the Kubernetes job by the
# process group it was started in), removes the state directory and exits
# 0.
#
# Environment: LISTEN (default :9877; 127.0.0.1:0 takes a free port),
# DEMO_STATE (keep the state in this directory), DEMO_SCRAPE_INTERVAL,
# DEMO_BUILD_APISERVER (the command that builds kube-apiserver and prints
# its path, and with --cached prints it only when built: default
# testdata/kubernetes/build-apiserver.sh).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
GO=${GO:-go}
listen=${LISTEN:-:9877}
interval=${DEMO_SCRAPE_INTERVAL:-10}
build_apiserver=${DEMO_BUILD_APISERVER:-$root/testdata/kubernetes/build-apiserver.sh}

say() { echo "demo: $*" >&2; }
die() { say "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (starts sshd, runs libvirtd as nobody)"
for tool in curl etcd openssl; do
	command -v "$tool" >/dev/null || die "$tool not found: run make deps (testdata/install-deps.sh)"
done

if [ -n "${DEMO_STATE:-}" ]; then
	mkdir -p "$DEMO_STATE"
	state=$(cd "$DEMO_STATE" && pwd)
	keep=1
else
	state=$(mktemp -d /tmp/phe-demo.XXXXXX)
	keep=0
fi
# libvirtd runs as nobody under $state/kvm.
chmod 0711 "$state"
mkdir -p "$state/kvm" "$state/gcp"
chmod 0700 "$state/gcp"

exporter_pid= standin_pid= kube_pid= child=
# stop_pid <pid> <name>: TERM it, wait for it, KILL it if it lingers.
stop_pid() {
	local pid=$1 i
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		say "$2 ($pid) did not stop, killing it"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
}
# stop_group <pgid>: the same for a process group this script started.
stop_group() {
	local pgid=$1 i
	[ -n "$pgid" ] && kill -0 -- "-$pgid" 2>/dev/null || return 0
	kill -TERM -- "-$pgid" 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do
		kill -0 -- "-$pgid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL -- "-$pgid" 2>/dev/null || true
	wait "$pgid" 2>/dev/null || true
}
cleanup() {
	rc=$?
	trap - EXIT INT TERM
	[ -z "$child" ] || stop_pid "$child" "the demo's scrape"
	# The Kubernetes job first: it may be building, or starting the daemons.
	stop_group "$kube_pid"
	stop_pid "$exporter_pid" exporter
	stop_pid "$standin_pid" compute-standin
	[ ! -d "$state/k8s" ] || "$root/testdata/kubernetes/ctl.sh" stop "$state/k8s" || true
	"$root/testdata/kvm/ctl.sh" stop "$state/kvm" || true
	[ "$keep" = 1 ] || rm -rf "$state"
	say "stopped"
	exit "$rc"
}
trap cleanup EXIT
# Ctrl-C (or TERM) is how the demo is meant to end: once everything it
# started is stopped (cleanup), it exits 0.
trap 'exit 0' INT TERM

# in_background <command...>: runs it as a child and waits for it, so that
# a signal is handled at once rather than after the command.
in_background() {
	"$@" &
	child=$!
	local rc=0
	wait "$child" || rc=$?
	child=
	return "$rc"
}

cd "$root"
say "building the exporter and compute-standin"
mkdir -p "$state/bin"
# The version stamps of .promu.yml's ldflags, from VERSION and git, so that
# the status page's footer and build_info say what runs (compute-standin
# has no such variables: the flags leave it alone).
version_pkg=github.com/prometheus/common/version
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
branch=$(git rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)
ldflags="-X $version_pkg.Version=$(cat VERSION) -X $version_pkg.Revision=$revision -X $version_pkg.Branch=$branch"
ldflags+=" -X $version_pkg.BuildUser=$(id -un)@$(hostname) -X $version_pkg.BuildDate=$(date -u +%Y%m%d-%H:%M:%S)"
in_background "$GO" build -ldflags "$ldflags" -o "$state/bin/" ./cmd/provider_health_exporter ./testdata/demo/compute-standin

"$root/testdata/kvm/ctl.sh" start "$state/kvm"
# shellcheck disable=SC1091
. "$state/kvm/env"
# kvm-promised's domain: defined, never started (a shut-off domain is
# promised its memory all the same), of the host's memory less the 512 MiB
# reserved and 512 MiB left for two proxies of 256 MiB.
host_mib=$(($(virsh -q -c "$KVM_IT_VIRSH_URI" nodeinfo | awk '/^Memory size:/ {print $3}') / 1024))
virsh -q -c "$KVM_IT_VIRSH_URI" define /dev/stdin >/dev/null <<XML
<domain type='qemu'><name>demo-proxy</name><memory unit='MiB'>$((host_mib - 1024))</memory><vcpu>2</vcpu><os><type arch='x86_64'>hvm</type></os></domain>
XML

"$state/bin/compute-standin" -bodies "$root/testdata/gcp" -credentials "$state/gcp/service-account.json" \
	-addr-file "$state/gcp/url" -disabled standin-disabled -exhausted europe-west4 >"$state/compute-standin.log" 2>&1 &
standin_pid=$!
for ((i = 0; i < 300; i++)); do
	[ -s "$state/gcp/url" ] && break
	kill -0 "$standin_pid" 2>/dev/null || { cat "$state/compute-standin.log" >&2; die "compute-standin exited"; }
	sleep 0.1
done
[ -s "$state/gcp/url" ] || die "compute-standin did not start (log: $state/compute-standin.log)"
compute_url=$(cat "$state/gcp/url")

# The kvm and gcp entries; testdata/demo/kubernetes.sh appends the
# kubernetes ones to this file when kube-apiserver answers.
cat >"$state/provider_health.base.yml" <<YAML
# Written by testdata/demo/demo.sh; everything runs on this machine:
#   kvm:        a real sshd and libvirtd (testdata/kvm/ctl.sh), one host on loopback;
#   gcp:        compute-standin, a STAND-IN of Google's Compute API on loopback
#               ($compute_url) serving the bodies recorded from the real API
#               under testdata/gcp/: not Google;
#   kubernetes: a real kube-apiserver and etcd (testdata/kubernetes/ctl.sh),
#               added by a reload once they answer.
defaults:
  timeout: 15s
kvm:
  - name: kvm-lab              # Ready; capacity: pool available / 1GiB, free memory / 256MiB
    user: $KVM_IT_USER
    private_key_file: $KVM_IT_KEY
    known_hosts_file: $KVM_IT_KNOWN_HOSTS
    libvirt_socket: $KVM_IT_SOCKET
    libvirt_uri: $KVM_IT_URI
    pool: $KVM_IT_POOL
    min_pool_available: 1GiB
    min_free_memory: 256MiB
    hosts:
      - {address: "$KVM_IT_ADDRESS", name: lab-host}
  - name: kvm-pool-full        # PoolFull: the pool has less than min_pool_available
    user: $KVM_IT_USER
    private_key_file: $KVM_IT_KEY
    known_hosts_file: $KVM_IT_KNOWN_HOSTS
    libvirt_socket: $KVM_IT_SOCKET
    libvirt_uri: $KVM_IT_URI
    pool: $KVM_IT_POOL
    min_pool_available: 1000TiB
    hosts:
      - {address: "$KVM_IT_ADDRESS", name: full-host}
  - name: kvm-promised         # Ready; capacity 2, bound by the memory promised to a shut-off domain
    user: $KVM_IT_USER
    private_key_file: $KVM_IT_KEY
    known_hosts_file: $KVM_IT_KNOWN_HOSTS
    libvirt_socket: $KVM_IT_SOCKET
    libvirt_uri: $KVM_IT_URI
    pool: $KVM_IT_POOL
    min_free_memory: 256MiB
    memory_allocation_ratio: 1.0
    min_free_vcpus: 1
    hosts:
      - {address: "$KVM_IT_ADDRESS", name: promised-host}
  - name: kvm-host-key         # HostKeyMismatch: known_hosts holds another key for the host
    user: $KVM_IT_USER
    private_key_file: $KVM_IT_KEY
    known_hosts_file: $KVM_IT_KNOWN_HOSTS_WRONG
    libvirt_socket: $KVM_IT_SOCKET
    libvirt_uri: $KVM_IT_URI
    pool: $KVM_IT_POOL
    hosts:
      - {address: "$KVM_IT_ADDRESS", name: moved-host}
gcp:
  - name: gcp-standin          # Ready (stand-in: aggregated-instances.json); capacity 2 (regions-ok.json: CPUS 6 of 24, 8 a proxy)
    project: standin-ready
    credentials_file: $state/gcp/service-account.json
    endpoint: $compute_url
    regions: [us-central1]
    min_quota_headroom: {CPUS: 8, INSTANCES: 1, IN_USE_ADDRESSES: 1}
  - name: gcp-standin-quota    # QuotaExhausted (stand-in: regions-exhausted.json, IN_USE_ADDRESSES 8 of 8)
    project: standin-quota
    credentials_file: $state/gcp/service-account.json
    endpoint: $compute_url
    regions: [europe-west4]
    min_quota_headroom: {IN_USE_ADDRESSES: 1}
  - name: gcp-standin-disabled # APIDisabled (stand-in: error-403-service-disabled.json)
    project: standin-disabled
    credentials_file: $state/gcp/service-account.json
    endpoint: $compute_url
YAML
cp "$state/provider_health.base.yml" "$state/provider_health.yml"

# The log exists before the exporter writes to it: the loop below reads it.
: >"$state/exporter.log"
"$state/bin/provider_health_exporter" --config.file="$state/provider_health.yml" \
	--web.listen-address="$listen" >>"$state/exporter.log" 2>&1 &
exporter_pid=$!
addr=
for ((i = 0; i < 600; i++)); do
	addr=$(sed -n 's/.*msg="Listening on" address=\([^ ]*\).*/\1/p' "$state/exporter.log" | head -n 1)
	[ -z "$addr" ] || break
	kill -0 "$exporter_pid" 2>/dev/null || { cat "$state/exporter.log" >&2; die "the exporter exited"; }
	sleep 0.1
done
[ -n "$addr" ] || die "the exporter did not listen (log: $state/exporter.log)"
port=${addr##*:}
host=${listen%:*}
case $host in "" | 0.0.0.0 | "[::]") host=localhost ;; esac
base="http://$host:$port"

# Kubernetes in the background, in a process group of its own so that
# stopping it stops the build or the daemons it is starting.
if "$build_apiserver" --cached >/dev/null 2>&1; then
	say "kubernetes: starting kube-apiserver and etcd in the background; the kubernetes entries join by a reload when they answer"
else
	say "kubernetes: kube-apiserver is not built on this machine yet: building it in the background (10-20 minutes, once; log $state/kube-apiserver-build.log); the kubernetes entries join by a reload when it is ready, the other kinds do not wait"
fi
setsid "$here/kubernetes.sh" "$state" "$base" "$build_apiserver" &
kube_pid=$!

cat >&2 <<MSG
demo: config $state/provider_health.yml, exporter log $state/exporter.log
demo: gcp is compute-standin, a stand-in of the Compute API on $compute_url serving testdata/gcp/ (not Google)
demo: status page: $base/
demo: try
        curl -s $host:$port/metrics | grep -E '^provider_health_(ready|reason.*} 1)'
        curl -s $host:$port/api/v1/status
        curl -s '$host:$port/probe?name=kvm-pool-full&debug=true'
        curl -s $host:$port/metrics | grep '^provider_health_capacity'
demo: scraping $base/metrics every ${interval}s, as Prometheus would; Ctrl-C stops everything.
MSG

# report prints each target's reason when it differs from the last scrape's.
declare -A last
report() {
	local kind name reason target
	while read -r kind name reason target; do
		if [ "${last[$kind/$name/$target]:-}" != "$reason" ]; then
			last[$kind/$name/$target]=$reason
			say "$kind $name/$target: $reason"
		fi
	done < <(sed -n 's/^provider_health_reason{name="\([^"]*\)",provider="\([^"]*\)",reason="\([^"]*\)",target="\([^"]*\)"} 1$/\2 \1 \3 \4/p' "$1")
}

while kill -0 "$exporter_pid" 2>/dev/null; do
	if in_background curl -fsS --max-time 60 -H 'X-Prometheus-Scrape-Timeout-Seconds: 15' \
		-o "$state/scrape.txt" "$base/metrics" 2>/dev/null; then
		report "$state/scrape.txt"
	fi
	in_background sleep "$interval" || true
done
wait "$exporter_pid" || true
die "the exporter exited (log: $state/exporter.log)"
