#!/usr/bin/env bash
# Installs what the demo and the tests need on Debian 12, as root: the real
# components (sshd, libvirtd, etcd, Prometheus, Alertmanager, Chromium) from
# Debian's packages, the users and groups libvirtd insists on, and the pinned
# Go tools.
# A no-op when everything is there already.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
export DEBIAN_FRONTEND=noninteractive

packages=(
  make git openssl curl ca-certificates systemd                 # scripts; systemd-analyze checks deploy/systemd
  openssh-server openssh-client                                 # kvm: real sshd
  libvirt-daemon libvirt-clients libvirt-daemon-driver-qemu     # kvm: real libvirtd
  qemu-system-x86                                               # kvm: the emulator libvirtd probes to define domains (none is started)
  etcd-server                                                   # kubernetes: etcd for kube-apiserver
  prometheus prometheus-alertmanager                            # promtool, amtool, end-to-end test
  chromium                                                      # the status page in a real browser
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $EUID -ne 0 ]]; then
    echo "install-deps: missing Debian packages (${missing[*]}); run as root" >&2
    exit 1
  fi
  echo "install-deps: apt-get install ${missing[*]}" >&2
  # The packages must not start system services (Prometheus on :9090, sshd
  # on :22): the tests start their own. Docker-style images already refuse
  # with a policy-rc.d; add one for the duration when there is none.
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# libvirtd refuses to start without these (Debian's libvirt-daemon-system
# creates them; we install the daemon alone).
if [[ $EUID -eq 0 ]]; then
  getent group kvm >/dev/null || groupadd --system kvm
  getent group libvirt-qemu >/dev/null || groupadd --system libvirt-qemu
  getent passwd libvirt-qemu >/dev/null ||
    useradd --system --no-create-home --shell /usr/sbin/nologin -g libvirt-qemu -G kvm libvirt-qemu
fi

# Go modules and the pinned tools (jsonnet, promu) of tools/go.mod.
go mod download
go -C tools mod download
