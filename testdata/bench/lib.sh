# lib.sh: what the benchmark scripts that run the real binary in front of
# the simulated KVM fleet share (prometheus-cost.sh, coldstart.sh). Sourced,
# after setting `me` (the script's name, for messages) and `root` (the
# repository). It makes $tmp, stops every process the script started by its
# PID and removes the worktrees it added when the script ends.
#
# The fleet is BenchmarkFleet's simulator (collector/kvm/fleet_bench_test.go:
# the kvm test binary run with KVM_FLEET_HOSTS): one in-process SSH server per
# host on its own 127.0.0.1 port, answering libvirt's RPCs after a latency,
# in a process of its own. A fleet this large cannot run for real on one
# machine.

for b in curl ssh-keygen git awk; do
	command -v "$b" >/dev/null || { echo "$me: $b not found" >&2; exit 1; }
done
# The fleet's sockets and the exporter's connections: two descriptors a host
# on each side.
ulimit -n 20000 2>/dev/null || ulimit -n "$(ulimit -Hn)"

tmp=$(mktemp -d "/tmp/phe-${me%.sh}.XXXXXX")
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

# freeport prints a loopback port nothing listens on.
freeport() {
	local p
	while :; do
		# Below Linux's ephemeral range (32768 and up by default), where
		# a connection's own end may hold a port no listener shows.
		p=$((20000 + RANDOM % 12000))
		(echo >"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
	done
}

# waitfor CMD... retries CMD once a second for up to 5 minutes.
waitfor() {
	for _ in $(seq 300); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
	echo "$me: timed out waiting for: $*" >&2
	return 1
}

# build_fleet builds the simulator and the key the exporter logs in with.
build_fleet() {
	echo "$me: building the fleet simulator" >&2
	(cd "$root" && "$GO" test -c -o "$tmp/kvm.test" ./collector/kvm/)
	ssh-keygen -q -t ed25519 -N '' -C "$me" -f "$tmp/id_ed25519"
}

# start_fleet HOSTS HUNG LATENCY [ENTRY_LINES] starts a fleet (HUNG percent
# of its hosts accept TCP and never speak) and writes its known_hosts and
# the exporter's configuration, $tmp/fleet.yml, whose entry gets
# ENTRY_LINES (indented keys) too. It sets fleet_pid and healthy.
start_fleet() {
	rm -f "$tmp/fleet.in" "$tmp/fleet.out"
	mkfifo "$tmp/fleet.in"
	KVM_FLEET_HOSTS=$1 KVM_FLEET_HUNG=$2 KVM_FLEET_LATENCY=$3 \
		KVM_FLEET_KEY="$(cat "$tmp/id_ed25519.pub")" \
		"$tmp/kvm.test" -test.run='^$' <"$tmp/fleet.in" >"$tmp/fleet.out" 2>"$tmp/fleet.err" &
	fleet_pid=$!
	pids+=("$fleet_pid")
	# The fleet serves until its stdin closes: fd 3 holds it open.
	exec 3>"$tmp/fleet.in"
	waitfor grep -qx ready "$tmp/fleet.out"
	local socket
	socket=$(awk '$1 == "socket" { print $2 }' "$tmp/fleet.out")
	awk '$1 == "host" { $1 = $2 = $3 = ""; sub(/^ +/, ""); print }' "$tmp/fleet.out" >"$tmp/known_hosts"
	# known_hosts is not brand new when an exporter starts, as on a real
	# machine.
	touch -d '-1 hour' "$tmp/known_hosts"
	{
		echo "kvm:"
		echo "  - name: fleet"
		echo "    user: proxyops"
		[ -z "${4:-}" ] || printf '%s\n' "$4"
		echo "    private_key_file: $tmp/id_ed25519"
		echo "    known_hosts_file: $tmp/known_hosts"
		echo "    libvirt_socket: $socket"
		echo "    hosts:"
		awk '$1 == "host" { printf "      - name: h%05d\n        address: %s\n", n++, $3 }' "$tmp/fleet.out"
	} >"$tmp/fleet.yml"
	healthy=$(grep -c '^host ok' "$tmp/fleet.out" || true)
}

# stop_fleet ends the fleet: its stdin closes, then its PID is waited for.
stop_fleet() {
	exec 3>&-
	stop "$fleet_pid"
}

# build_rev REV builds the exporter at REV (a git revision, from a
# temporary worktree, or "." for the working tree) into $tmp/exporter and
# sets label.
build_rev() {
	local src=$root
	label=$1
	if [ "$1" = . ]; then
		label="$(git -C "$root" rev-parse --short HEAD)+worktree"
	else
		src=$tmp/src-$1
		git -C "$root" worktree add -q --detach "$src" "$1"
		worktrees+=("$src")
	fi
	echo "$me: building the exporter at $label" >&2
	(cd "$src" && "$GO" build -o "$tmp/exporter" ./cmd/provider_health_exporter)
}
