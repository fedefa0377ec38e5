#!/bin/bash
# make demo: on a Debian machine, as root, brings up sshd and libvirtd with a
# `dir` pool on loopback (see ctl.sh), writes an exporter config for them and
# runs the exporter on :9877 in the foreground:
#
#   curl -s localhost:9877/metrics | grep provider_health_kvm
#
# Ctrl-C stops the exporter, then every daemon by its PID, and removes the
# state directory. Set DEMO_STATE to keep the state in a directory of your
# choice; LISTEN to listen elsewhere than :9877.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
GO=${GO:-go}
listen=${LISTEN:-:9877}

[ "$(id -u)" = 0 ] || { echo "demo.sh: run as root (starts sshd, runs libvirtd as nobody)" >&2; exit 1; }

if [ -n "${DEMO_STATE:-}" ]; then
	state=$DEMO_STATE
	mkdir -p "$state"
	keep=1
else
	state=$(mktemp -d /tmp/phe-demo.XXXXXX)
	keep=0
fi

exporter_pid=
cleanup() {
	rc=$?
	trap - EXIT INT TERM
	if [ -n "$exporter_pid" ] && kill -0 "$exporter_pid" 2>/dev/null; then
		kill -TERM "$exporter_pid" 2>/dev/null || true
		wait "$exporter_pid" 2>/dev/null || true
	fi
	"$here/ctl.sh" stop "$state" || true
	[ "$keep" = 1 ] || rm -rf "$state"
	echo "demo: stopped" >&2
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$here/ctl.sh" start "$state"
# shellcheck disable=SC1091
. "$state/env"

cat >"$state/provider_health.yml" <<YAML
# Written by testdata/kvm/demo.sh: one KVM host, the sshd and libvirtd the
# demo started on loopback.
defaults:
  timeout: 10s
kvm:
  - name: demo
    user: $KVM_IT_USER
    private_key_file: $KVM_IT_KEY
    known_hosts_file: $KVM_IT_KNOWN_HOSTS
    libvirt_socket: $KVM_IT_SOCKET
    libvirt_uri: $KVM_IT_URI
    pool: $KVM_IT_POOL
    hosts:
      - address: $KVM_IT_ADDRESS
        name: localhost
YAML

port=${listen##*:}
cat >&2 <<MSG
demo: config $state/provider_health.yml
demo: exporter on $listen; try
        curl -s localhost:$port/metrics | grep provider_health_kvm
        curl -s 'localhost:$port/probe?name=demo&debug=true'
demo: Ctrl-C stops everything.
MSG

cd "$root"
# Build first so Ctrl-C reaches the exporter itself, not `go run`.
"$GO" build -o "$state/provider_health_exporter" ./cmd/provider_health_exporter
"$state/provider_health_exporter" --config.file="$state/provider_health.yml" --web.listen-address="$listen" &
exporter_pid=$!
wait "$exporter_pid"
