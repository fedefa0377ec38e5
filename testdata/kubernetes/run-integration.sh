#!/usr/bin/env bash
# make integration-kubernetes: runs the kubernetes provider's integration
# tests against a real kube-apiserver + etcd on 127.0.0.1.
#
# Builds (or takes from the cache) kube-apiserver with build-apiserver.sh,
# starts etcd and kube-apiserver with ctl.sh in a fresh state directory, runs
# `go test -tags integration` on deploy/kubernetes/validate and then
# collector/kubernetes, and stops both daemons
# by their PIDs on exit. The state directory (certificates, logs) is removed
# after a passing run and kept, with its path printed, after a failing one.
#
# Needs: go, etcd (Debian etcd-server), openssl, curl.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
GO="${GO:-go}"

for tool in etcd openssl curl; do
  command -v "$tool" >/dev/null || {
    echo "run-integration: $tool not found (apt-get install etcd-server openssl curl)" >&2
    exit 1
  }
done

start_build=$SECONDS
apiserver="$("$here/build-apiserver.sh")"
echo "run-integration: kube-apiserver $apiserver ($((SECONDS - start_build))s)" >&2
# kube-scheduler is the schedule tests' oracle; they start and stop it
# with ctl.sh (PHE_K8S_SCHEDULER).
start_build=$SECONDS
scheduler="$("$here/build-scheduler.sh")"
echo "run-integration: kube-scheduler $scheduler ($((SECONDS - start_build))s)" >&2

state="$(mktemp -d "${TMPDIR:-/tmp}/phe-k8s.XXXXXX")"
rc=1
cleanup() {
  "$here/ctl.sh" stop "$state" || true
  if [[ $rc -eq 0 ]]; then
    rm -rf "$state"
  else
    echo "run-integration: failed; logs and certificates kept in $state" >&2
  fi
}
trap cleanup EXIT

start_up=$SECONDS
"$here/ctl.sh" start "$state" "$apiserver"
echo "run-integration: etcd and kube-apiserver ready ($((SECONDS - start_up))s)" >&2

set -a
# shellcheck disable=SC1091
. "$state/env"
set +a
export PHE_K8S_STATE="$state" PHE_K8S_CTL="$here/ctl.sh" PHE_K8S_SCHEDULER="$scheduler"

cd "$repo"
start_test=$SECONDS
# The manifests' tests (deploy/kubernetes/validate, a module of its own: the
# kube-prometheus component's RBAC and the Helm chart's dry-run, each in a
# namespace of its own), then the provider's, in random order: none depends
# on another or on an earlier run (the one that stops the apiserver starts it
# again). Extra arguments go to the provider's `go test` (e.g. -count=2).
"$GO" -C deploy/kubernetes/validate test -tags integration -count=1 -timeout 20m -v -run 'Integration' ./... &&
  "$GO" test -tags integration -count=1 -shuffle=on -timeout 20m -v -run 'Integration' ./collector/kubernetes/... "$@" && rc=0 || rc=$?
echo "run-integration: tests took $((SECONDS - start_test))s, exit $rc" >&2
exit "$rc"
