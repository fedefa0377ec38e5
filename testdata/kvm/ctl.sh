#!/bin/bash
# Starts and stops the real components the kvm integration tests and `make
# demo` run against, all on loopback and all state under one directory:
#
#   - OpenSSH sshd on 127.0.0.1:<free high port>, its own sshd_config,
#     throwaway host keys, a throwaway user key (and a second key the server
#     does not accept); login user `nobody`, public keys only. With
#     KVM_CTL_SSH_ADDRESSES=127.0.0.1,127.0.0.2,... it listens on each of
#     those loopback addresses (same port, same host key), so that each is a
#     distinct host to the exporter (the sharding end-to-end test).
#   - libvirtd as an unprivileged ("session") daemon running as `nobody`
#     with HOME/XDG dirs and its socket under the state directory, so the
#     machine's own libvirt (/etc/libvirt, /run/libvirt) is never touched,
#     and a `dir` pool under the state directory.
#
# Every daemon is started in the foreground of a background job and stopped
# by the PID recorded in the state directory; nothing else is ever killed.
#
# usage: ctl.sh start|stop|start-sshd|stop-sshd|start-libvirtd|stop-libvirtd|
#               pause-libvirtd|resume-libvirtd <statedir>
#
# `start` writes <statedir>/env (KEY=value lines) describing the setup.
#
# KVM_CTL_ROOT_LOGIN=1 at the first `start` of a state directory also lets
# root log in with the user key, restricted to commands from loopback:
# virsh's qemu+ssh transport runs a remote command, which nobody's nologin
# shell refuses (testdata/bench/virsh.sh). Off by default, so the tests and
# the demo get a server that accepts nobody alone.
set -euo pipefail

cmd=${1:?usage: ctl.sh start|stop|start-sshd|stop-sshd|start-libvirtd|stop-libvirtd <statedir>}
state=${2:?state directory missing}
state=$(cd "$state" && pwd)

user=nobody
group=$(id -gn "$user")
pool=phe-test
sock_dir=$state/libvirt/sock
sock=$sock_dir/libvirt-sock
uri=qemu:///session
virsh_uri="qemu:///session?socket=$sock"
# libvirtd's keepalive for the clients that ask for it: small, so that a
# test can wait past its timeout (interval x (count + 1) seconds).
keepalive_interval=1
keepalive_count=2
# All of 127.0.0.0/8 is on lo: listening on any of it needs no setup.
IFS=, read -r -a ssh_addrs <<<"${KVM_CTL_SSH_ADDRESSES:-127.0.0.1}"

log() { echo "kvm-ctl: $*" >&2; }
die() { log "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (starts sshd and runs libvirtd as $user)"
for b in /usr/sbin/sshd /usr/sbin/libvirtd /usr/bin/virsh /usr/bin/ssh-keygen /usr/bin/setpriv; do
	[ -x "$b" ] || die "$b missing: apt-get install openssh-server openssh-client libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients util-linux"
done

# wait_for <seconds> <description> <command...>: polls until the command
# succeeds.
wait_for() {
	local secs=$1 what=$2
	shift 2
	local i
	for ((i = 0; i < secs * 10; i++)); do
		if "$@" >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.1
	done
	die "$what did not come up within ${secs}s"
}

# alive <pidfile>: the recorded process is running.
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# stop_pid <pidfile> <name>: TERM the recorded process (and, for sshd, the
# per-connection children it forked), wait for it, KILL it if it lingers.
stop_pid() {
	local pidfile=$1 name=$2 pid i
	[ -s "$pidfile" ] || return 0
	pid=$(cat "$pidfile")
	if kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 100; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			log "$name ($pid) did not stop, killing it"
			kill -KILL "$pid" 2>/dev/null || true
		fi
	fi
	rm -f "$pidfile"
}

# port_free <port>: nothing listens on it at any of the addresses.
port_free() {
	local a
	for a in "${ssh_addrs[@]}"; do
		if (exec 3<>"/dev/tcp/$a/$1") 2>/dev/null; then
			return 1
		fi
	done
}

# ssh_up <port>: sshd accepts on every address.
ssh_up() {
	local a
	for a in "${ssh_addrs[@]}"; do
		(exec 3<>"/dev/tcp/$a/$1") 2>/dev/null || return 1
	done
}

setup_ssh() {
	local d=$state/ssh
	[ -f "$d/id_ed25519" ] && return 0
	install -d -m 0700 "$d"
	ssh-keygen -q -t ed25519 -N '' -C phe-test-host -f "$d/ssh_host_ed25519_key"
	ssh-keygen -q -t ed25519 -N '' -C phe-test-other-host -f "$d/other_host_key"
	ssh-keygen -q -t ed25519 -N '' -C phe-test-user -f "$d/id_ed25519"
	ssh-keygen -q -t ed25519 -N '' -C phe-test-rejected -f "$d/rejected_ed25519"
	# sshd reads authorized_keys as the login user.
	install -m 0644 "$d/id_ed25519.pub" "$state/authorized_keys"

	local a port
	for a in "${ssh_addrs[@]}"; do
		[[ $a == 127.* ]] || die "KVM_CTL_SSH_ADDRESSES: $a is not a loopback address"
	done
	# Below the kernel's ephemeral range: a port the kernel gave an
	# outgoing connection cannot be bound while that connection lives, and
	# a fleet benchmark just before leaves thousands of them.
	local lo
	lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
	[[ $lo -gt 12000 ]] || lo=32768
	for ((i = 0; i < 50; i++)); do
		port=$((10000 + RANDOM % (lo - 10000)))
		if port_free "$port"; then
			break
		fi
	done
	echo "$port" >"$state/ssh_port"
	: >"$d/known_hosts"
	: >"$d/known_hosts_wrong"
	for a in "${ssh_addrs[@]}"; do
		echo "[$a]:$port $(cut -d' ' -f1,2 "$d/ssh_host_ed25519_key.pub")" >>"$d/known_hosts"
		echo "[$a]:$port $(cut -d' ' -f1,2 "$d/other_host_key.pub")" >>"$d/known_hosts_wrong"
	done

	local allow=$user root_block=
	if [ "${KVM_CTL_ROOT_LOGIN:-0}" = 1 ]; then
		allow="$user root"
		# restrict: no forwarding, no pty, no ~/.ssh/rc; commands only.
		echo "restrict,from=\"127.0.0.1\" $(cat "$d/id_ed25519.pub")" >"$state/authorized_keys_root"
		chmod 0600 "$state/authorized_keys_root"
		root_block="Match User root
	PermitRootLogin prohibit-password
	AuthorizedKeysFile $state/authorized_keys_root"
	fi

	cat >"$state/sshd_config" <<CONF
# Throwaway sshd for provider_health_exporter tests: loopback, keys only.
Port $port
$(printf 'ListenAddress %s\n' "${ssh_addrs[@]}")
HostKey $d/ssh_host_ed25519_key
PidFile none
AuthorizedKeysFile $state/authorized_keys
AllowUsers $allow
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
# The state directory lives under /tmp, which StrictModes rejects.
StrictModes no
AllowStreamLocalForwarding local
AllowTcpForwarding local
AllowAgentForwarding no
X11Forwarding no
PermitTTY no
LogLevel VERBOSE
$root_block
CONF
}

start_sshd() {
	setup_ssh
	if alive "$state/sshd.pid"; then
		return 0
	fi
	# Debian's unit creates the privilege separation directory; we start
	# sshd ourselves.
	[ -d /run/sshd ] || install -d -m 0755 /run/sshd
	local port
	port=$(cat "$state/ssh_port")
	/usr/sbin/sshd -t -f "$state/sshd_config" || die "sshd_config invalid"
	/usr/sbin/sshd -D -f "$state/sshd_config" -E "$state/sshd.log" </dev/null >>"$state/sshd.log" 2>&1 &
	echo $! >"$state/sshd.pid"
	wait_for 10 "sshd on ${ssh_addrs[*]} port $port" ssh_up "$port"
	log "sshd $(cat "$state/sshd.pid") on ${ssh_addrs[*]} port $port"
}

setup_libvirt() {
	local d=$state/libvirt
	[ -f "$d/libvirtd.conf" ] && return 0
	# nobody must be able to reach its dirs and the pool; the keys stay in
	# the root-only ssh dir.
	chmod 0755 "$state"
	install -d -m 0700 -o "$user" -g "$group" "$d" "$d/home" "$d/run" "$sock_dir"
	chmod 0711 "$d"
	install -d -m 0755 -o "$user" -g "$group" "$state/pool"
	cat >"$d/libvirtd.conf" <<CONF
# Throwaway unprivileged libvirtd for provider_health_exporter tests.
unix_sock_dir = "$sock_dir"
log_outputs = "3:stderr"
# Small, so that a test can keep a connection idle past libvirtd's
# keepalive timeout (interval x (count + 1)) in seconds: libvirtd pings
# only clients that asked for keepalive, which the exporter never does.
keepalive_interval = $keepalive_interval
keepalive_count = $keepalive_count
CONF
	chown "$user:$group" "$d/libvirtd.conf"
}

pool_running() { virsh -q -c "$virsh_uri" pool-info "$pool" 2>/dev/null | grep -q '^State: *running'; }

start_libvirtd() {
	setup_libvirt
	if alive "$state/libvirtd.pid"; then
		return 0
	fi
	local d=$state/libvirt
	rm -f "$sock"
	# setpriv and env exec, so $! is libvirtd itself.
	setpriv --reuid="$user" --regid="$group" --clear-groups \
		env -i HOME="$d/home" XDG_RUNTIME_DIR="$d/run" XDG_CONFIG_HOME="$d/home/.config" \
		XDG_CACHE_HOME="$d/home/.cache" PATH=/usr/sbin:/usr/bin:/sbin:/bin \
		/usr/sbin/libvirtd --config "$d/libvirtd.conf" </dev/null >>"$state/libvirtd.log" 2>&1 &
	echo $! >"$state/libvirtd.pid"
	wait_for 20 "libvirtd socket $sock" virsh -c "$virsh_uri" uri
	if ! virsh -q -c "$virsh_uri" pool-info "$pool" >/dev/null 2>&1; then
		virsh -q -c "$virsh_uri" pool-define-as "$pool" dir --target "$state/pool" >/dev/null
		virsh -q -c "$virsh_uri" pool-autostart "$pool" >/dev/null
	fi
	# After a restart libvirtd autostarts the pool on its own, possibly
	# while we look: start it only if it is still not running.
	pool_running || virsh -q -c "$virsh_uri" pool-start "$pool" >/dev/null 2>&1 || true
	wait_for 10 "pool $pool" pool_running
	log "libvirtd $(cat "$state/libvirtd.pid") on $sock, pool $pool running"
}

write_env() {
	cat >"$state/env" <<ENV
KVM_IT_STATE=$state
KVM_IT_CTL=$(cd "$(dirname "$0")" && pwd)/ctl.sh
KVM_IT_ADDRESS=${ssh_addrs[0]}:$(cat "$state/ssh_port")
KVM_IT_ADDRESSES=$(printf "%s:$(cat "$state/ssh_port")," "${ssh_addrs[@]}" | sed 's/,$//')
KVM_IT_USER=$user
KVM_IT_KEY=$state/ssh/id_ed25519
KVM_IT_REJECTED_KEY=$state/ssh/rejected_ed25519
KVM_IT_KNOWN_HOSTS=$state/ssh/known_hosts
KVM_IT_KNOWN_HOSTS_WRONG=$state/ssh/known_hosts_wrong
KVM_IT_SOCKET=$sock
KVM_IT_URI=$uri
KVM_IT_VIRSH_URI=$virsh_uri
KVM_IT_POOL=$pool
KVM_IT_POOL_DIR=$state/pool
KVM_IT_KEEPALIVE_INTERVAL=$keepalive_interval
KVM_IT_KEEPALIVE_COUNT=$keepalive_count
ENV
}

case $cmd in
start)
	start_sshd
	start_libvirtd
	write_env
	;;
stop)
	# A paused libvirtd would not act on TERM.
	alive "$state/libvirtd.pid" && kill -CONT "$(cat "$state/libvirtd.pid")" 2>/dev/null || true
	stop_pid "$state/sshd.pid" sshd
	stop_pid "$state/libvirtd.pid" libvirtd
	;;
start-sshd) start_sshd ;;
stop-sshd) stop_pid "$state/sshd.pid" sshd ;;
start-libvirtd) start_libvirtd ;;
stop-libvirtd) stop_pid "$state/libvirtd.pid" libvirtd ;;
# A wedged libvirtd: the socket accepts and nothing answers.
pause-libvirtd) alive "$state/libvirtd.pid" && kill -STOP "$(cat "$state/libvirtd.pid")" ;;
resume-libvirtd) alive "$state/libvirtd.pid" && kill -CONT "$(cat "$state/libvirtd.pid")" ;;
*) die "unknown command $cmd" ;;
esac
