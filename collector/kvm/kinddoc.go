package kvm

import "github.com/egress-proxies/provider_health_exporter/provider"

// Doc is what the documentation says of the kind and of each of its
// reasons, as this kind gives them: `make generate` writes it into the
// README, docs/metrics.md, docs/configuration.md and mixin/runbook.md
// (docs/development.md: "Adding a provider").
func Doc() provider.KindDoc {
	return provider.KindDoc{
		Title:  "KVM",
		Target: "the host's name",
		Example: `  - name: lab
    user: proxyops
    private_key_file: /etc/provider_health/id_ed25519
    known_hosts_file: /etc/provider_health/known_hosts
    hosts:
      - address: 192.0.2.10:22
`,
		Reference: `  - name: lab
    user: proxyops                 # required (here or on every host)
    private_key_file: /etc/provider_health/id_ed25519   # required (here or on every host)
    passphrase_file: /etc/provider_health/passphrase    # optional
    known_hosts_file: /etc/provider_health/known_hosts  # required unless insecure_ignore_host_key
    insecure_ignore_host_key: false    # optional; logs a warning at every load
    libvirt_socket: /var/run/libvirt/libvirt-sock      # default
    libvirt_uri: qemu:///system        # default
    pool: default                      # default
    max_concurrent_dials: 128          # default; the most dials at once (the window starts at 16); established connections are not limited
    dial_timeout: 3s                   # default; one dial (tcp + ssh handshake + libvirt connect), well under the budget
    hosts:
      - address: 192.0.2.10:22         # required; port defaults to 22
        name: beelink                  # optional; default = host part of address
        user: other                    # optional per-host override (also pool, private_key_file)
`,
		Reasons: map[provider.Reason]provider.ReasonDoc{
			provider.ReasonReady: {
				Means:  "the pool is `running`",
				Action: "nothing",
			},
			provider.ReasonTimeout: {
				Means:  "the budget, `dial_timeout`, or the wait for the server's SSH identification (a quarter of `dial_timeout`) ran out, at whatever stage",
				Action: "the message names the stage and the bound; a slow network or an overloaded libvirtd — raise `timeout` or the scrape timeout, check the host's load; \"sent no SSH identification\" is a host that accepts TCP and says nothing: is sshd wedged, is the host half down? A kept connection whose call is still unanswered 1 s after the deadline is closed (logged as a dropped connection) and redialed next time; a dial that was still running goes on after the scrape",
			},
			provider.ReasonUnreachable: {
				Means:  "TCP refused/reset/no route, or the connection closed before libvirtd answered",
				Action: "is the host up, is sshd running and listening on that port, is a firewall in the way",
			},
			provider.ReasonDNSFailed: {
				Means:  "the host name did not resolve",
				Action: "fix the name or DNS; use an IP address in `address`",
			},
			ReasonSSHMaterialInvalid: {
				Means:   "key, passphrase or known_hosts file missing, unreadable or unparsable; key encrypted but no `passphrase_file`; wrong passphrase",
				Action:  "fix the file named in the message on the exporter's side (permissions: the exporter's user must read it); `--config.check` shows which. No dial is made",
				Runbook: "the private key, passphrase or `known_hosts` file is missing, unreadable, unparsable, or encrypted without a passphrase; run `provider_health_exporter --config.check`, which parses them and warns.",
			},
			ReasonSSHAuthFailed: {
				Means:   "the server rejected our key or user",
				Action:  "add the public key to the user's `authorized_keys` on the host; check `user`; sshd's log says why (`AllowUsers`, key options)",
				Runbook: "the host rejected the user or key; check `~USER/.ssh/authorized_keys` on the host and the configured `user`.",
			},
			ReasonSSHHandshakeFailed: {
				Means:   "the handshake broke otherwise: the server hung up (`MaxStartups`, `sshd -t` errors, not an SSH server), no common algorithm",
				Action:  "check sshd on the host and its log: its limits (`MaxStartups`), a non-SSH service on the port, or too old/new algorithms",
				Runbook: runbookDaemons,
			},
			ReasonHostKeyUnknown: {
				Means:   "`known_hosts_file` has no key for this host (note `[host]:port` for non-22 ports)",
				Action:  "verify the host's key out of band (its fingerprint) and add it (`ssh-keyscan` only on a trusted network)",
				Runbook: "the host is not in `known_hosts`.",
			},
			ReasonHostKeyMismatch: {
				Means:   "`known_hosts_file` has a different key for this host, or the key is `@revoked`",
				Action:  "the host was reinstalled — or someone is in the middle: **treat as a possible man in the middle** until you know the host was reinstalled or its keys rotated; verify before replacing the entry in `known_hosts`",
				Runbook: "the host presents another key than `known_hosts` holds, or its key is revoked. Compare `ssh-keyscan HOST` with the host's `/etc/ssh/ssh_host_*_key.pub` over a trusted channel. Treat an unexplained change as a security incident.",
			},
			ReasonLibvirtSocketUnavailable: {
				Means:   "the libvirt socket could not be opened over SSH: sshd could not open `libvirt_socket` (libvirtd not running, wrong path, the user may not open it, or sshd forbids stream-local forwarding, `AllowStreamLocalForwarding`)",
				Action:  "`systemctl status libvirtd` (or `virtqemud` with modular daemons: use its socket), check the path and the user's group (`libvirt`); sshd's log says \"connect to … failed\" or \"request was denied\"",
				Runbook: runbookDaemons,
			},
			ReasonLibvirtConnectFailed: {
				Means:   "libvirtd answered the connect with an error: unknown URI/driver, access denied (polkit/ACL), too many clients",
				Action:  "the message is libvirt's error; check `libvirt_uri` (driver missing?) and the user's rights, polkit/ACL (`virsh -c <uri>` as that user on the host)",
				Runbook: "libvirtd refused the connection, usually because the SSH user is not allowed to use the socket (group `libvirt`, polkit).",
			},
			ReasonLibvirtConnectionLost: {
				Means:   "the kept connection broke mid-check",
				Action:  "libvirtd or sshd restarted or the network dropped; the next check redials — alert if it keeps happening (`KVMConnectionFlapping`): if `kvm_connects_total` keeps rising, find what keeps cutting the connection (sshd `ClientAlive*`, a NAT/firewall idle timeout, libvirtd `keepalive_*`)",
				Runbook: runbookDaemons,
			},
			ReasonPoolMissing: {
				Means:   "no pool with that name (libvirt error 49)",
				Action:  "`virsh pool-list --all`; define the pool or fix `pool`",
				Runbook: runbookPoolList,
			},
			ReasonPoolInactive: {
				Means:   "the pool is defined but not started (pool state 0, inactive)",
				Action:  "`virsh pool-start <pool>`; `virsh pool-autostart <pool>` so it survives reboots",
				Runbook: runbookPoolList,
			},
			ReasonPoolBuilding: {
				Means:   "the pool is being built (pool state 1, building)",
				Action:  "wait for the build to finish; alert only if it lasts",
				Runbook: runbookPoolInfo,
			},
			ReasonPoolDegraded: {
				Means:   "the pool is running degraded (pool state 3, degraded)",
				Action:  "check the pool's backing storage: disks, RAID, NFS",
				Runbook: runbookPoolInfo,
			},
			ReasonPoolInaccessible: {
				Means:   "the pool is running but its storage cannot be reached (pool state 4, inaccessible)",
				Action:  "the backing storage is gone or unmounted: check mounts, NFS, disks; `virsh pool-refresh <pool>` after fixing",
				Runbook: runbookPoolInfo,
			},
			ReasonPoolFull: {
				Means:   "the pool is running, but its available bytes are below `min_pool_available`, or, with `disk_allocation_ratio`, its volumes' virtual sizes leave less than it of its capacity × the ratio (\"pool default promised: …\"); a pool-state reason wins over it; only with `min_pool_available`",
				Action:  "free space in the pool (`virsh vol-list <pool> --details`, delete unused volumes) or grow its storage; lower `min_pool_available` only if a proxy needs less. For the promise, the message says promised of allowed: delete volumes nobody uses, or raise `disk_allocation_ratio` only if the guests never fill their disks",
				Runbook: runbookHeadroom,
			},
			ReasonHostMemoryLow: {
				Means:   "the host's free memory (`NodeGetFreeMemory`) is below `min_free_memory`, or, with `memory_allocation_ratio`, the maximum memory promised to defined domains leaves less than it (\"memory promised: …\"); `PoolFull` and `NetworkInactive` win over it; only with `min_free_memory`",
				Action:  "stop or move guests, or add memory; libvirt counts page cache as used, so compare with `free -b` on the host. For a promise: undefine domains nobody starts (`virsh list --all`), shrink their memory, or move them",
				Runbook: runbookHeadroom,
			},
			ReasonHostCPULow: {
				Means:   "the vCPUs promised to defined domains leave fewer than `min_free_vcpus` of the host's CPUs × `cpu_allocation_ratio`; every other reason wins over it; only with `min_free_vcpus`",
				Action:  "undefine or shrink unused domains (`virsh list --all`, `virsh vcpucount`), move proxies to another host, or raise `cpu_allocation_ratio` if the guests are mostly idle",
				Runbook: runbookHeadroom,
			},
			ReasonVolumeMissing: {
				Means:   "the pool has no volume named `volume` (libvirt error 50): the base image proxies are cloned from was deleted or renamed; a pool-state reason and `PoolFull` win over it; only with `volume`",
				Action:  "`virsh vol-list <pool>` on the host; restore the image into the pool (`virsh vol-upload`, or copy it into the pool's directory and `virsh pool-refresh <pool>`), or fix `volume`",
				Runbook: "the pool is usable, but the base volume (`volume`) proxies are cloned from is not in it: `virsh vol-list POOL` on the host; the base image was deleted or renamed, or `volume` names another pool's volume.",
			},
			ReasonNetworkMissing: {
				Means:   "no libvirt network named `network` (libvirt error 43); `VolumeMissing` wins over it; only with `network`",
				Action:  "`virsh net-list --all`; define the network (`virsh net-define`) or fix `network`",
				Runbook: runbookNetwork,
			},
			ReasonNetworkInactive: {
				Means:   "the network is defined but not started, typically after a host reboot without autostart; `NetworkMissing` wins over it, it wins over `HostMemoryLow`; only with `network`",
				Action:  "`virsh net-start <network>`, then `virsh net-autostart <network>`: a network without autostart is down after every host reboot",
				Runbook: runbookNetwork,
			},
			provider.ReasonUnknown: {
				Means:  "anything else: a libvirt error on the pool calls other than a missing pool, a pool state this exporter does not know",
				Action: "the message and the log (`level=debug`) have the error",
			},
		},
	}
}

// The runbook's items that several reasons share.
const (
	runbookDaemons  = "sshd or libvirtd on the KVM host (`systemctl status sshd libvirtd`)."
	runbookPoolList = "`virsh pool-list --all` on the host."
	runbookPoolInfo = "`virsh pool-info POOL` on the host."
	runbookNetwork  = "the pool is usable, but the network (`network`) proxies attach to is not defined or not started: `virsh net-list --all` on the host; a network defined without autostart is inactive after the host reboots."
	runbookHeadroom = "the host answered, but a configured minimum is not met; the message says what was found and what is required. `PoolFull` (`min_pool_available`) is usually announced first by `KVMPoolFillingUp`: follow that runbook. `HostMemoryLow` (`min_free_memory`): `virsh nodememstats` and `virsh list` on the host; stop or move VMs, or lower `min_free_memory` if the host can run a proxy with less. `PoolFull`, `HostMemoryLow` with a message \"… promised: P of A; one proxy needs N\", and `HostCPULow` (\"vCPUs: P of A at ratio R; one proxy needs N vCPUs\"): with the promised-resource keys ([Promised resources](docs/configuration.md#promised-resources-kvm)), what the host's defined domains and volumes were given, running or not, leaves less than one proxy of the allowed total (capacity × ratio, less `reserved_memory` for memory). Free memory and pool bytes may look fine: a shut-off domain uses nothing until it starts, a sparse volume nothing until it is written. On the host: `virsh list --all` (shut-off domains count), `virsh dominfo DOMAIN` (CPU(s), Max memory), `virsh vol-list POOL --details` (Capacity, not Allocation); the exporter's `provider_health_kvm_domains_vcpus`, `_domains_memory_bytes` and `_pool_volumes_capacity_bytes` against `_host_cpus`, `_host_memory_bytes` and `_pool_capacity_bytes`. Undefine domains and delete volumes nobody uses, move proxies to another host, or, only if the guests really leave their allocation idle, raise `cpu_allocation_ratio`, `memory_allocation_ratio` or `disk_allocation_ratio` for that host."
)
