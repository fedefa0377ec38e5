#!/bin/bash
# make integration-kvm: starts real sshd and libvirtd on loopback (see
# ctl.sh) in a throwaway state directory, runs the kvm integration tests
# against them, and stops every daemon it started by PID on exit.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
GO=${GO:-go}

[ "$(id -u)" = 0 ] || { echo "run-integration.sh: must run as root (starts sshd, runs libvirtd as nobody)" >&2; exit 1; }

state=$(mktemp -d /tmp/phe-kvm.XXXXXX)
cleanup() {
	rc=$?
	"$here/ctl.sh" stop "$state" || true
	if [ "$rc" != 0 ]; then
		for f in sshd.log libvirtd.log; do
			[ -f "$state/$f" ] && { echo "--- $f (last 30 lines)"; tail -n 30 "$state/$f"; }
		done
	fi
	rm -rf "$state"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$here/ctl.sh" start "$state"
set -a
# shellcheck disable=SC1091
. "$state/env"
set +a

cd "$root"
"$GO" test -tags integration -count=1 -shuffle=on -timeout 20m -run '^TestIntegration' -v ./collector/kvm/... "$@"
