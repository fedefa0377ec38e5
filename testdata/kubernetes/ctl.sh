#!/usr/bin/env bash
# Starts and stops the real etcd + kube-apiserver the kubernetes integration
# tests run against, all on 127.0.0.1, everything under one state directory.
#
#   ctl.sh start <statedir> <kube-apiserver binary>
#       generates a CA, the serving certificate (SAN 127.0.0.1, localhost), the
#       service-account signing key and a static admin token; starts etcd and
#       kube-apiserver (--authorization-mode=RBAC, an audit log of every
#       request's metadata); waits for /readyz; writes <statedir>/env
#       (PHE_K8S_SERVER, PHE_K8S_CA, PHE_K8S_ADMIN_TOKEN_FILE, PHE_K8S_AUDIT_LOG,
#       PHE_K8S_ETCD: etcd's client URL, for objects only an older API server
#       could have stored).
#   ctl.sh stop-apiserver <statedir>   stops kube-apiserver (tests: Unreachable)
#   ctl.sh start-apiserver <statedir>  starts it again, on the same port and
#                                      etcd, and waits for /readyz
#   ctl.sh start-scheduler <statedir> <kube-scheduler binary>
#       starts kube-scheduler against that kube-apiserver with the admin
#       token (leader election off, its own port on 127.0.0.1) and waits
#       for its /healthz: the schedule tests' oracle. It schedules only
#       Pods with schedulerName: phe-oracle
#   ctl.sh stop-scheduler <statedir>   stops kube-scheduler
#   ctl.sh stop <statedir>             stops kube-scheduler (if started),
#                                      kube-apiserver, then etcd
#
# Each daemon is stopped by the PID recorded when it was started, never by name.
set -euo pipefail

die() { echo "ctl.sh: $*" >&2; exit 1; }

# free_port prints a loopback TCP port nothing listens on right now, taken
# below the kernel's ephemeral range: a port the kernel gave an outgoing
# connection cannot be bound while that connection lives, and a busy
# machine has thousands of them.
free_port() {
  local p lo
  lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  [[ $lo -gt 12000 ]] || lo=32768
  for _ in $(seq 1 200); do
    p=$((10000 + RANDOM % (lo - 10000)))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  die "no free port found"
}

# stop_pid stops the process whose PID is in file $1 and waits for it to exit.
stop_pid() {
  local file="$1" pid
  [[ -f "$file" ]] || return 0
  pid="$(cat "$file")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$file"
}

gen_certs() {
  local dir="$1"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$dir/ca.key" -out "$dir/ca.crt" -days 2 -subj "/CN=provider-health-test-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$dir/apiserver.key" -out "$dir/apiserver.csr" -subj "/CN=kube-apiserver" 2>/dev/null
  printf '%s\n' \
    "subjectAltName=IP:127.0.0.1,DNS:localhost" \
    "extendedKeyUsage=serverAuth" \
    "keyUsage=critical,digitalSignature" >"$dir/apiserver.ext"
  openssl x509 -req -in "$dir/apiserver.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
    -CAcreateserial -out "$dir/apiserver.crt" -days 2 -extfile "$dir/apiserver.ext" 2>/dev/null
  # Service-account tokens (TokenRequest) are signed with this key.
  openssl genrsa -out "$dir/sa.key" 2048 2>/dev/null
  openssl rsa -in "$dir/sa.key" -pubout -out "$dir/sa.pub" 2>/dev/null
  od -An -tx1 -N24 /dev/urandom | tr -d ' \n' >"$dir/admin.token"
  printf '%s,admin,admin-uid,system:masters\n' "$(cat "$dir/admin.token")" >"$dir/tokens.csv"
  chmod 600 "$dir"/*.key "$dir/admin.token" "$dir/tokens.csv"
}

wait_ready() {
  local state="$1" url="$2"
  for _ in $(seq 1 600); do
    kill -0 "$(cat "$state/apiserver.pid")" 2>/dev/null || {
      tail -n 40 "$state/apiserver.log" >&2
      die "kube-apiserver exited during startup (log: $state/apiserver.log)"
    }
    kill -0 "$(cat "$state/etcd.pid")" 2>/dev/null || {
      tail -n 40 "$state/etcd.log" >&2
      die "etcd exited during startup (log: $state/etcd.log)"
    }
    if curl -fsS --max-time 2 --cacert "$state/ca.crt" \
      -H "Authorization: Bearer $(cat "$state/admin.token")" "$url/readyz" >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.2
  done
  tail -n 40 "$state/apiserver.log" >&2
  die "kube-apiserver not ready after 120s (log: $state/apiserver.log)"
}

# start_apiserver starts kube-apiserver with the binary and ports that
# start recorded in <statedir>/apiserver.conf.
start_apiserver() {
  local state="$1" apiserver api_port etcd_port
  { read -r apiserver; read -r api_port; read -r etcd_port; } <"$state/apiserver.conf"
  # Admission stays at the defaults: the manifests are checked, and the
  # pod_template dry runs judged, by the plugins a real cluster runs
  # (NamespaceLifecycle, LimitRanger, ServiceAccount, PodSecurity,
  # ResourceQuota, the admission webhooks and ValidatingAdmissionPolicy
  # among them). No controller manager, scheduler or kubelet: Pods stay
  # Pending, which is all a list needs, and tests create the default
  # ServiceAccounts and write quota status themselves.
  "$apiserver" \
    --bind-address=127.0.0.1 --secure-port="$api_port" \
    --advertise-address=127.0.0.1 --endpoint-reconciler-type=none \
    --etcd-servers="http://127.0.0.1:$etcd_port" \
    --cert-dir="$state/apiserver-certs" \
    --tls-cert-file="$state/apiserver.crt" --tls-private-key-file="$state/apiserver.key" \
    --client-ca-file="$state/ca.crt" \
    --token-auth-file="$state/tokens.csv" \
    --authorization-mode=RBAC \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$state/sa.pub" \
    --service-account-signing-key-file="$state/sa.key" \
    --service-cluster-ip-range=10.96.0.0/24 \
    --profiling=false \
    --audit-policy-file="$state/audit-policy.yaml" --audit-log-path="$state/audit.log" \
    >>"$state/apiserver.log" 2>&1 &
  echo $! >"$state/apiserver.pid"
  wait_ready "$state" "https://127.0.0.1:$api_port"
}

start() {
  local state="$1" apiserver="$2"
  [[ -x "$apiserver" ]] || die "kube-apiserver binary $apiserver not executable"
  command -v etcd >/dev/null || die "etcd not found (apt-get install etcd-server)"
  command -v openssl >/dev/null || die "openssl not found (apt-get install openssl)"
  command -v curl >/dev/null || die "curl not found (apt-get install curl)"
  mkdir -p "$state"
  gen_certs "$state"

  local etcd_port peer_port api_port
  etcd_port="$(free_port)"
  peer_port="$(free_port)"
  while [[ "$peer_port" == "$etcd_port" ]]; do peer_port="$(free_port)"; done
  api_port="$(free_port)"
  while [[ "$api_port" == "$etcd_port" || "$api_port" == "$peer_port" ]]; do api_port="$(free_port)"; done

  etcd --name phe --data-dir "$state/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "phe=http://127.0.0.1:$peer_port" \
    --logger zap --log-level warn \
    >"$state/etcd.log" 2>&1 &
  echo $! >"$state/etcd.pid"

  # The audit log records every request's metadata (user, verb, URI with
  # its query), written before the request is handled (the log backend's
  # default blocking mode): the pod_template tests read from it that the
  # exporter's creates all carry dryRun=All.
  cat >"$state/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [ResponseStarted]
rules:
  - level: Metadata
EOF

  printf '%s\n' "$apiserver" "$api_port" "$etcd_port" >"$state/apiserver.conf"
  start_apiserver "$state"
  cat >"$state/env" <<EOF
PHE_K8S_SERVER=https://127.0.0.1:$api_port
PHE_K8S_CA=$state/ca.crt
PHE_K8S_ADMIN_TOKEN_FILE=$state/admin.token
PHE_K8S_AUDIT_LOG=$state/audit.log
PHE_K8S_ETCD=http://127.0.0.1:$etcd_port
EOF
}

# start_scheduler starts kube-scheduler with a kubeconfig holding the
# admin token, so that it may read and bind everything, as the real one's
# system:kube-scheduler identity may.
start_scheduler() {
  local state="$1" scheduler="$2" api_port port
  [[ -x "$scheduler" ]] || die "kube-scheduler binary $scheduler not executable"
  [[ ! -f "$state/scheduler.pid" ]] || die "kube-scheduler is running (pid $(cat "$state/scheduler.pid"))"
  { read -r _; read -r api_port; read -r _; } <"$state/apiserver.conf"
  cat >"$state/scheduler.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
  - name: test
    cluster: {server: "https://127.0.0.1:$api_port", certificate-authority: "$state/ca.crt"}
users:
  - name: admin
    user: {tokenFile: "$state/admin.token"}
contexts:
  - name: test
    context: {cluster: test, user: admin}
current-context: test
EOF
  cat >"$state/scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: "$state/scheduler.kubeconfig"
leaderElection:
  leaderElect: false
# Only Pods that name this scheduler: the other tests' Pods stay Pending,
# as they expect, and never land on the schedule tests' synthetic Nodes.
profiles:
  - schedulerName: phe-oracle
EOF
  port="$(free_port)"
  "$scheduler" --config="$state/scheduler.yaml" \
    --bind-address=127.0.0.1 --secure-port="$port" \
    --authentication-kubeconfig="$state/scheduler.kubeconfig" \
    --authorization-kubeconfig="$state/scheduler.kubeconfig" \
    --cert-dir="$state/scheduler-certs" \
    >>"$state/scheduler.log" 2>&1 &
  echo $! >"$state/scheduler.pid"
  for _ in $(seq 1 600); do
    kill -0 "$(cat "$state/scheduler.pid")" 2>/dev/null || {
      tail -n 40 "$state/scheduler.log" >&2
      rm -f "$state/scheduler.pid"
      die "kube-scheduler exited during startup (log: $state/scheduler.log)"
    }
    if curl -fsSk --max-time 2 "https://127.0.0.1:$port/healthz" >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.2
  done
  tail -n 40 "$state/scheduler.log" >&2
  die "kube-scheduler not healthy after 120s (log: $state/scheduler.log)"
}

cmd="${1:-}"
state="${2:-}"
[[ -n "$cmd" && -n "$state" ]] || die "usage: ctl.sh start|stop|stop-apiserver|start-apiserver|start-scheduler|stop-scheduler <statedir> [binary]"
case "$cmd" in
start)
  [[ $# -eq 3 ]] || die "usage: ctl.sh start <statedir> <kube-apiserver>"
  start "$state" "$3"
  ;;
stop-apiserver)
  stop_pid "$state/apiserver.pid"
  ;;
start-scheduler)
  [[ $# -eq 3 ]] || die "usage: ctl.sh start-scheduler <statedir> <kube-scheduler>"
  start_scheduler "$state" "$3"
  ;;
stop-scheduler)
  stop_pid "$state/scheduler.pid"
  ;;
start-apiserver)
  [[ ! -f "$state/apiserver.pid" ]] || die "kube-apiserver is running (pid $(cat "$state/apiserver.pid"))"
  start_apiserver "$state"
  ;;
stop)
  stop_pid "$state/scheduler.pid"
  stop_pid "$state/apiserver.pid"
  stop_pid "$state/etcd.pid"
  ;;
*)
  die "unknown command $cmd"
  ;;
esac
