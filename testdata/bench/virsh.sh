#!/bin/bash
# virsh.sh [file]: the part of `make bench` that puts one host's steady
# check next to a virsh run against the same real sshd and libvirtd (docs/scaling.md:
# "Performance", "Against virsh"). It starts them with testdata/kvm/ctl.sh in
# a throwaway state directory, runs BenchmarkVirsh (collector/kvm), appends
# its output to file and prints one summary line. Without root or without the
# Debian packages of testdata/install-deps.sh it says why it skipped and
# exits 0. Every daemon is stopped by its PID (ctl.sh stop).
#
# VIRSH_COUNT (default 3) and VIRSH_BENCHTIME (default 5s) are go test's
# -count and -benchtime.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ctl=$root/testdata/kvm/ctl.sh
GO=${GO:-go}
count=${VIRSH_COUNT:-3}
benchtime=${VIRSH_BENCHTIME:-5s}
out=${1:-/dev/null}

skip() {
	echo "virsh.sh: BenchmarkVirsh skipped: $*"
	exit 0
}

[ "$(uname -s)" = Linux ] || skip "needs Linux (Debian's sshd and libvirtd)"
[ "$(id -u)" = 0 ] || skip "needs root (starts sshd, runs libvirtd as nobody)"
for b in /usr/sbin/sshd /usr/bin/ssh /usr/sbin/libvirtd /usr/bin/virsh /usr/bin/virt-ssh-helper /usr/bin/setpriv; do
	[ -x "$b" ] || skip "$b missing (testdata/install-deps.sh installs it)"
done

state=$(mktemp -d /tmp/phe-virsh.XXXXXX)
cleanup() {
	rc=$?
	"$ctl" stop "$state" || true
	rm -rf "$state"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

logs() {
	for f in sshd.log libvirtd.log; do
		[ -f "$state/$f" ] && { echo "--- $f (last 20 lines)"; tail -n 20 "$state/$f"; }
	done
	return 0
}

# virsh's qemu+ssh runs a remote command, which nobody's nologin shell
# refuses: root logs in instead (ctl.sh: KVM_CTL_ROOT_LOGIN).
if ! KVM_CTL_ROOT_LOGIN=1 "$ctl" start "$state" 2>"$state/ctl.err"; then
	cat "$state/ctl.err"
	logs
	skip "sshd and libvirtd did not start: $(tail -n 1 "$state/ctl.err")"
fi
set -a
# shellcheck disable=SC1091
. "$state/env"
set +a

# libvirt 9.0's ssh transport runs `ssh` with no way to give it a
# known_hosts file (its known_hosts parameter is the libssh transports'), but
# command= names the binary. This one adds the test's known_hosts, checked
# strictly, and -F /dev/null: an ssh_config of root's (ControlMaster, say)
# must not change what is measured. libvirt runs it with a scrubbed
# environment, hence the paths written in.
d=$state/virsh
install -d -m 0755 "$d" "$d/run" "$d/run/libvirt"
cat >"$d/ssh" <<SH
#!/bin/sh
exec /usr/bin/ssh -F /dev/null -o IdentitiesOnly=yes -o StrictHostKeyChecking=yes \\
	-o UserKnownHostsFile=$KVM_IT_KNOWN_HOSTS -o GlobalKnownHostsFile=/dev/null "\$@"
SH

# The remote helper, run by sshd as root through libvirt's netcat mode
# (netcat=): libvirt runs `<netcat> -q` once to probe for nc's -q0, with the
# session's stdin, then `<netcat> [-q0] -U <socket>`. The probe gets nothing;
# the real run becomes Debian's virt-ssh-helper as libvirtd's user. Not
# proxy=native: virt-ssh-helper ignores socket=, and as root it looks for the
# system daemon under /var/run/libvirt; as nobody it finds the session
# daemon's socket under $XDG_RUNTIME_DIR/libvirt, here a link to ctl.sh's.
# Debian 12 has no nc unless netcat-openbsd is installed.
ln -s "$KVM_IT_SOCKET" "$d/run/libvirt/libvirt-sock"
cat >"$d/helper" <<SH
#!/bin/sh
[ "\$1" = -q ] && exit 0
exec setpriv --reuid=$(id -u "$KVM_IT_USER") --regid=$(id -g "$KVM_IT_USER") --clear-groups \\
	env -i XDG_RUNTIME_DIR=$d/run LIBVIRT_AUTOSTART=0 /usr/bin/virt-ssh-helper qemu:///session
SH
chmod 0755 "$d/ssh" "$d/helper"

# /session: ctl.sh's libvirtd is an unprivileged session daemon.
export KVM_IT_VIRSH_SSH_URI="qemu+ssh://root@$KVM_IT_ADDRESS/session?socket=$KVM_IT_SOCKET&keyfile=$KVM_IT_KEY&no_tty=1&proxy=netcat&netcat=$d/helper&command=$d/ssh"

cd "$root"
set +e
"$GO" test -tags integration -run '^$' -bench '^BenchmarkVirsh$' -benchmem \
	-count "$count" -benchtime "$benchtime" -timeout 30m ./collector/kvm/ | tee "$state/bench.txt"
rc=${PIPESTATUS[0]}
set -e
cat "$state/bench.txt" >>"$out"
if [ "$rc" != 0 ]; then
	logs
	echo "virsh.sh: BenchmarkVirsh failed" >&2
	exit 1
fi

awk '
$1 ~ /^BenchmarkVirsh\/kept(-[0-9]+)?$/ { kn++; ks += $3 }
$1 ~ /^BenchmarkVirsh\/virsh(-[0-9]+)?$/ { vn++; vs += $3 }
END {
	if (kn == 0 || vn == 0) { print "virsh.sh: no BenchmarkVirsh results" > "/dev/stderr"; exit 1 }
	printf "virsh: a steady check on the kept connection takes %.2f ms, a virsh pool-info over qemu+ssh %.0f ms: %.0f times as long (mean of %d and %d runs)\n", \
		ks / kn / 1e6, vs / vn / 1e6, (vs / vn) / (ks / kn), kn, vn
}' "$state/bench.txt"
