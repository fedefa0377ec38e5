#!/bin/bash
# schedule.sh [file]: the part of `make bench` that measures schedule at
# 1,000 Nodes and 20,000 Pods in a real kube-apiserver (docs/scaling.md:
# "schedule: watch caches and the node fit"): it starts etcd and kube-apiserver with
# testdata/kubernetes/ctl.sh in a throwaway state directory, runs
# BenchmarkScheduleScale (collector/kubernetes, build tag integration) and
# appends its output to file. Without a built kube-apiserver
# (testdata/kubernetes/build-apiserver.sh, 10-20 minutes the first time) or
# etcd it says why it skipped and exits 0. Every daemon is stopped by its
# PID (ctl.sh stop).
#
# SCHEDULE_COUNT (default 1) and SCHEDULE_BENCHTIME (default 20x) are go
# test's -count and -benchtime.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
k8s=$root/testdata/kubernetes
GO=${GO:-go}
count=${SCHEDULE_COUNT:-1}
benchtime=${SCHEDULE_BENCHTIME:-20x}
out=${1:-/dev/null}

skip() {
	echo "schedule.sh: BenchmarkScheduleScale skipped: $*"
	exit 0
}

apiserver=$("$k8s/build-apiserver.sh" --cached) || skip "kube-apiserver not built (run testdata/kubernetes/build-apiserver.sh once, 10-20 min)"
for tool in etcd openssl curl; do
	command -v "$tool" >/dev/null || skip "$tool not found (testdata/install-deps.sh installs it)"
done

state=$(mktemp -d /tmp/phe-schedule.XXXXXX)
cleanup() {
	rc=$?
	"$k8s/ctl.sh" stop "$state" || true
	rm -rf "$state"
	exit "$rc"
}
trap cleanup EXIT
"$k8s/ctl.sh" start "$state" "$apiserver"
set -a
# shellcheck disable=SC1091
. "$state/env"
set +a
export PHE_K8S_STATE="$state" PHE_K8S_CTL="$k8s/ctl.sh"
cd "$root"
"$GO" test -tags integration -run '^$' -bench '^BenchmarkScheduleScale$' -benchmem -count "$count" -benchtime "$benchtime" -timeout 30m ./collector/kubernetes/ | tee -a "$out"
