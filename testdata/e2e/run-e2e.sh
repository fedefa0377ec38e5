#!/bin/sh
# End-to-end tests: the exporter scraped by a REAL Prometheus that
# evaluates the mixin's alerts and sends them to a REAL Alertmanager, and
# two exporter replicas sharding REAL KVM hosts (sshd + libvirtd).
#
# Without make, from the repository root:
#
#   apt-get install prometheus prometheus-alertmanager openssh-client \
#     openssh-server libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients \
#     etcd-server openssl curl   # once
#   testdata/e2e/run-e2e.sh                 # or, by hand:
#   go build -o /tmp/phe ./cmd/provider_health_exporter
#   E2E_EXPORTER=/tmp/phe go test -tags e2e -count=1 -v -timeout 10m ./testdata/e2e/
#
# The tests run twice: against Debian's Prometheus 2.42 (prometheus on $PATH)
# and against Prometheus 3 built by testdata/prometheus/build-prometheus.sh
# (cached after the first build). Extra arguments go to `go test` (e.g.
# -run TestEndToEnd). Environment:
#   E2E_PROMETHEUS     one Prometheus binary to run against instead of both
#   E2E_ALERTMANAGER   Alertmanager binary  (default: prometheus-alertmanager,
#                                            then alertmanager, on $PATH)
#   E2E_KEEP=1         keep the work directory (configs, rules, logs of every
#                      component) and print its path
#
# What TestEndToEnd (testdata/e2e/e2e_test.go, build tag e2e) does, all on
# 127.0.0.1 and in a temporary directory:
#   - starts loopback stand-ins: a Kubernetes API (HTTPS) answering the Pod
#     list, a Compute API answering aggregatedList with
#     testdata/gcp/aggregated-instances.json and regions.get of europe-west4
#     with testdata/gcp/regions-exhausted.json, an OAuth token endpoint for a
#     service-account file, and the Alertmanager webhook receiver; as root,
#     a real KVM host too (sshd + libvirtd of testdata/kvm/ctl.sh);
#   - starts the exporter with a kubernetes entry (Ready), a gcp entry (Ready),
#     a gcp entry with min_quota_headroom (QuotaExhausted), a kvm entry whose
#     host is a loopback port that refuses connections (Unreachable) and, as root, a kvm entry
#     on the real host with min_pool_available 1000TiB (PoolFull), with
#     an ssh-keygen key, HOME set to an empty directory and GCE_METADATA_HOST
#     set to 127.0.0.1:1;
#   - starts a real etcd + kube-apiserver (testdata/kubernetes/ctl.sh; the
#     apiserver built once by build-apiserver.sh) for a kubernetes entry
#     with pod_template whose proxy Pod runs as root in a namespace
#     enforcing Pod Security restricted: AdmissionDenied from the real
#     admission, asserted like QuotaExhausted, with ProviderActionRequired
#     too, and no Pod left behind; on the same kube-apiserver a schedule
#     entry with capacity_domain over three synthetic zones whose
#     capacity after losing e2e-zone-a is -2, so that
#     ProviderCapacityNotDomainResilient fires for that zone alone;
#   - renders testdata/e2e/alerts.jsonnet (the mixin with `for` of seconds),
#     starts Prometheus (scrape and evaluation every 1s) and Alertmanager
#     (group_wait 1s, no cluster);
#   - asserts the target is up, then loads the rules (SIGHUP) and asserts
#     every rule is healthy, the verdicts and the budget from the scrape
#     timeout header in PromQL, QuotaExhausted and PoolFull (up 1, ready 0)
#     in Prometheus, /metrics, /probe, /api/v1/status and the status page
#     with their messages, ProviderNotReady and ProviderUnavailable firing
#     for the not-ready entries only (labels, description naming the reason)
#     and ProviderQuotaNearLimit for the exhausted quota, all delivered to
#     the webhook; reloads the exporter without the kvm entries and the
#     QuotaExhausted one (200, alerts resolve); reloads a broken file (500,
#     gauge 0, ProviderHealthConfigReloadFailed fires); stops the exporter
#     (ProviderHealthExporterDown fires).
# TestShardedKVM (testdata/e2e/shard_test.go; needs root, skipped without)
# runs deploy/prometheus/prometheus-sharded.yml:
#   - starts real KVM hosts with testdata/kvm/ctl.sh: one sshd listening on
#     127.0.0.1 to 127.0.0.6 (six hosts) and an unprivileged libvirtd with a
#     running dir pool;
#   - starts two exporter replicas with the same file of six hosts, and
#     Prometheus with the committed file, only the replica addresses, hosts
#     and intervals (1s, the kvm job 2s) replaced;
#   - asserts every host Ready, scraped from the one replica its hash names,
#     both replicas with hosts, sum(provider_health_kvm_connects_total) = 6
#     after more scrapes, each replica's /api/v1/status showing only its own
#     hosts checked, and sshd's log one session per host address.
# Every process is started by the test and stopped by its own PID. Every
# wait is a bounded poll (60s at most). A run takes about 30-40 seconds per
# Prometheus, and 20 more for TestShardedKVM.
set -eu

cd "$(dirname "$0")/../.."

if [ -n "${E2E_PROMETHEUS:-}" ]; then
	prometheuses="$E2E_PROMETHEUS"
else
	prometheuses="prometheus $(testdata/prometheus/build-prometheus.sh | sed -n 1p)"
fi
for bin in go ssh-keygen etcd openssl curl $prometheuses; do
	command -v "$bin" >/dev/null 2>&1 || { echo "run-e2e.sh: $bin not found on \$PATH" >&2; exit 1; }
done
if [ -z "${E2E_ALERTMANAGER:-}" ] && ! command -v prometheus-alertmanager >/dev/null 2>&1 && ! command -v alertmanager >/dev/null 2>&1; then
	echo "run-e2e.sh: neither prometheus-alertmanager nor alertmanager on \$PATH (apt-get install prometheus-alertmanager)" >&2
	exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/provider-health-e2e-bin.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

echo "building the exporter"
go build -o "$tmp/provider_health_exporter" ./cmd/provider_health_exporter

for prom in $prometheuses; do
	echo "end-to-end test against $("$prom" --version 2>&1 | head -n 1)"
	E2E_EXPORTER="$tmp/provider_health_exporter" E2E_PROMETHEUS="$prom" \
		go test -tags e2e -count=1 -v -timeout 10m "$@" ./testdata/e2e/
done
