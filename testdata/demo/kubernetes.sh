#!/bin/bash
# The Kubernetes part of `make demo`, run by testdata/demo/demo.sh in the
# background in a process group of its own (demo.sh stops the group):
# builds kube-apiserver if it is not built yet (the build command prints
# the binary's path), starts it and etcd with testdata/kubernetes/ctl.sh,
# gives the demo's ServiceAccount the right to list Pods and the namespace's
# ResourceQuotas and no other, creates a ResourceQuota with its usage,
# writes a kubeconfig with its token, creates three synthetic Nodes and a
# second ServiceAccount for the schedule entries, adds four kubernetes
# entries to the exporter's configuration and reloads the exporter.
#
# usage: kubernetes.sh <state dir> <exporter base URL> <build command>
set -euo pipefail

state=$1 base=$2 build=$3
root=$(cd "$(dirname "$0")/../.." && pwd)
namespace=egress-proxies
account=provider-health-exporter

say() { echo "demo: kubernetes: $*" >&2; }
fail() {
	say "$*; the demo goes on without kubernetes"
	exit 1
}

apiserver=$("$build" 2>>"$state/kube-apiserver-build.log") || fail "building kube-apiserver failed (log $state/kube-apiserver-build.log)"
"$root/testdata/kubernetes/ctl.sh" start "$state/k8s" "$apiserver" >>"$state/k8s.log" 2>&1 ||
	fail "etcd or kube-apiserver did not start (log $state/k8s.log)"
# shellcheck disable=SC1091
. "$state/k8s/env"

# kcreate <path> <json>: creates an object as the admin (201; 409 when a
# kept state directory has it already) and prints the answer.
kcreate() {
	local out code
	out=$(mktemp "$state/k8s/answer.XXXXXX")
	code=$(curl -sS --max-time 30 --cacert "$PHE_K8S_CA" -H "Authorization: Bearer $(cat "$PHE_K8S_ADMIN_TOKEN_FILE")" \
		-H 'Content-Type: application/json' -o "$out" -w '%{http_code}' -X POST "$PHE_K8S_SERVER$1" -d "$2") || code=000
	case $code in
	200 | 201 | 409) cat "$out"; rm -f "$out" ;;
	*) cat "$out" >&2; rm -f "$out"; fail "POST $1 answered $code" ;;
	esac
}

kcreate /api/v1/namespaces "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"$namespace\"}}" >/dev/null
kcreate "/api/v1/namespaces/$namespace/serviceaccounts" \
	"{\"apiVersion\":\"v1\",\"kind\":\"ServiceAccount\",\"metadata\":{\"name\":\"$account\"}}" >/dev/null
# What the check needs (docs/configuration.md: "Kubernetes"): list Pods in
# every namespace. Nothing else, so that the can_i entry is Forbidden.
kcreate /apis/rbac.authorization.k8s.io/v1/clusterroles \
	'{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"provider-health-demo"},"rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["list"]}]}' >/dev/null
kcreate /apis/rbac.authorization.k8s.io/v1/clusterrolebindings \
	"{\"apiVersion\":\"rbac.authorization.k8s.io/v1\",\"kind\":\"ClusterRoleBinding\",\"metadata\":{\"name\":\"provider-health-demo\"},\"roleRef\":{\"apiGroup\":\"rbac.authorization.k8s.io\",\"kind\":\"ClusterRole\",\"name\":\"provider-health-demo\"},\"subjects\":[{\"kind\":\"ServiceAccount\",\"name\":\"$account\",\"namespace\":\"$namespace\"}]}" >/dev/null
# A ResourceQuota of 20 pods in $namespace, 3 of them used, and the right
# to list it: kube-demo's capacity (docs/metrics.md: "Capacity") is 17. No
# quota controller runs here, so the usage is written by the demo through
# the status subresource, as the controller would.
kcreate "/api/v1/namespaces/$namespace/resourcequotas" \
	'{"apiVersion":"v1","kind":"ResourceQuota","metadata":{"name":"proxies"},"spec":{"hard":{"pods":"20"}}}' >/dev/null
curl -fsS --max-time 30 --cacert "$PHE_K8S_CA" -H "Authorization: Bearer $(cat "$PHE_K8S_ADMIN_TOKEN_FILE")" \
	-H 'Content-Type: application/merge-patch+json' -X PATCH -o /dev/null \
	"$PHE_K8S_SERVER/api/v1/namespaces/$namespace/resourcequotas/proxies/status" \
	-d '{"status":{"hard":{"pods":"20"},"used":{"pods":"3"}}}' || fail "writing the ResourceQuota's usage failed"
kcreate "/apis/rbac.authorization.k8s.io/v1/namespaces/$namespace/roles" \
	'{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"provider-health-demo-quotas"},"rules":[{"apiGroups":[""],"resources":["resourcequotas"],"verbs":["list"]}]}' >/dev/null
kcreate "/apis/rbac.authorization.k8s.io/v1/namespaces/$namespace/rolebindings" \
	"{\"apiVersion\":\"rbac.authorization.k8s.io/v1\",\"kind\":\"RoleBinding\",\"metadata\":{\"name\":\"provider-health-demo-quotas\"},\"roleRef\":{\"apiGroup\":\"rbac.authorization.k8s.io\",\"kind\":\"Role\",\"name\":\"provider-health-demo-quotas\"},\"subjects\":[{\"kind\":\"ServiceAccount\",\"name\":\"$account\",\"namespace\":\"$namespace\"}]}" >/dev/null
token=$(kcreate "/api/v1/namespaces/$namespace/serviceaccounts/$account/token" \
	'{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":86400}}' |
	tr -d '\n' | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p')
[ -n "$token" ] || fail "no ServiceAccount token from the TokenRequest API"
install -m 0600 /dev/null "$state/k8s/demo.token"
printf '%s' "$token" >"$state/k8s/demo.token"
cat >"$state/k8s/kubeconfig" <<YAML
apiVersion: v1
kind: Config
clusters: [{name: demo, cluster: {server: "$PHE_K8S_SERVER", certificate-authority: "$PHE_K8S_CA"}}]
users: [{name: $account, user: {tokenFile: "$state/k8s/demo.token"}}]
contexts: [{name: demo, context: {cluster: demo, user: $account, namespace: $namespace}}]
current-context: demo
YAML

# kpatch <path> <json>: a JSON merge patch as the admin.
kpatch() {
	curl -fsS --max-time 30 --cacert "$PHE_K8S_CA" -H "Authorization: Bearer $(cat "$PHE_K8S_ADMIN_TOKEN_FILE")" \
		-H 'Content-Type: application/merge-patch+json' -X PATCH "$PHE_K8S_SERVER$1" -d "$2" >/dev/null ||
		fail "PATCH $1 failed"
}

# kube-demo-unschedulable and kube-demo-proxies (docs/configuration.md:
# "Scheduling: schedule"): three synthetic Nodes, named as such (no kubelet
# runs them: their status is written here, and the not-ready taint that
# admission puts on a new Node is lifted, as no node controller runs):
# nodes 1 and 3 have 2 CPUs, node 2 is cordoned. The unschedulable entry's
# proxy Pod asks for 4 CPUs, so no node takes it; the proxies entry's is
# proxy-shaped (host port 3128, one per node by anti-affinity to its own
# label), so each schedulable node takes one: capacity 2. Their own
# ServiceAccount may create Pods in $namespace (the dry run), list the
# namespace's ResourceQuotas, and list and watch Nodes and Pods.
sched=provider-health-scheduler
kcreate "/api/v1/namespaces/$namespace/serviceaccounts" \
	'{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"default"}}' >/dev/null
kcreate "/api/v1/namespaces/$namespace/serviceaccounts" \
	"{\"apiVersion\":\"v1\",\"kind\":\"ServiceAccount\",\"metadata\":{\"name\":\"$sched\"}}" >/dev/null
kcreate /apis/rbac.authorization.k8s.io/v1/clusterroles \
	'{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"provider-health-demo-schedule"},"rules":[{"apiGroups":[""],"resources":["nodes","pods"],"verbs":["list","watch"]}]}' >/dev/null
kcreate /apis/rbac.authorization.k8s.io/v1/clusterrolebindings \
	"{\"apiVersion\":\"rbac.authorization.k8s.io/v1\",\"kind\":\"ClusterRoleBinding\",\"metadata\":{\"name\":\"provider-health-demo-schedule\"},\"roleRef\":{\"apiGroup\":\"rbac.authorization.k8s.io\",\"kind\":\"ClusterRole\",\"name\":\"provider-health-demo-schedule\"},\"subjects\":[{\"kind\":\"ServiceAccount\",\"name\":\"$sched\",\"namespace\":\"$namespace\"}]}" >/dev/null
kcreate "/apis/rbac.authorization.k8s.io/v1/namespaces/$namespace/roles" \
	'{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"provider-health-demo-placement"},"rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["create"]},{"apiGroups":[""],"resources":["resourcequotas"],"verbs":["list"]}]}' >/dev/null
kcreate "/apis/rbac.authorization.k8s.io/v1/namespaces/$namespace/rolebindings" \
	"{\"apiVersion\":\"rbac.authorization.k8s.io/v1\",\"kind\":\"RoleBinding\",\"metadata\":{\"name\":\"provider-health-demo-placement\"},\"roleRef\":{\"apiGroup\":\"rbac.authorization.k8s.io\",\"kind\":\"Role\",\"name\":\"provider-health-demo-placement\"},\"subjects\":[{\"kind\":\"ServiceAccount\",\"name\":\"$sched\",\"namespace\":\"$namespace\"}]}" >/dev/null
for i in 1 2 3; do
	node=demo-synthetic-node-$i
	kcreate /api/v1/nodes "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"$node\",\"labels\":{\"provider-health-demo\":\"synthetic\"}}}" >/dev/null
	kpatch "/api/v1/nodes/$node/status" '{"status":{"capacity":{"cpu":"2","memory":"4Gi","pods":"110"},"allocatable":{"cpu":"2","memory":"4Gi","pods":"110"},"conditions":[{"type":"Ready","status":"True","reason":"SyntheticNode","message":"a synthetic Node of make demo: no kubelet runs it"}]}}'
done
kpatch /api/v1/nodes/demo-synthetic-node-1 '{"spec":{"taints":null}}'
kpatch /api/v1/nodes/demo-synthetic-node-2 '{"spec":{"taints":null,"unschedulable":true}}'
kpatch /api/v1/nodes/demo-synthetic-node-3 '{"spec":{"taints":null}}'

# Capacity per failure domain (kube-demo-zones): three more synthetic Nodes,
# one per zone, tainted so that no other entry's proxy goes there, and eight
# running proxies of a zone-spread Deployment bound to them as after a zone
# came back: six in demo-zone-a, one in each of the others. Each Node has
# 4 CPUs, 40 proxies of 100m. The spread (maxSkew 3, DoNotSchedule) lets 112
# more in, but losing demo-zone-a (its Node tainted unreachable, its Pods
# gone) leaves that zone a domain at zero under the default nodeTaintsPolicy
# Ignore: the others may take 3 each, two of them already hold one, so 4 of
# the 6 proxies find a place and 2 do not (after-loss -2); losing demo-zone-b
# or demo-zone-c leaves room for one more (after-loss 1).
zoned=egress-proxies-zoned
kcreate /api/v1/namespaces "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"$zoned\"}}" >/dev/null
kcreate "/api/v1/namespaces/$zoned/serviceaccounts" \
	'{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"default"}}' >/dev/null
kcreate "/apis/rbac.authorization.k8s.io/v1/namespaces/$zoned/roles" \
	'{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"provider-health-demo-placement"},"rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["create"]},{"apiGroups":[""],"resources":["resourcequotas"],"verbs":["list"]}]}' >/dev/null
kcreate "/apis/rbac.authorization.k8s.io/v1/namespaces/$zoned/rolebindings" \
	"{\"apiVersion\":\"rbac.authorization.k8s.io/v1\",\"kind\":\"RoleBinding\",\"metadata\":{\"name\":\"provider-health-demo-placement\"},\"roleRef\":{\"apiGroup\":\"rbac.authorization.k8s.io\",\"kind\":\"Role\",\"name\":\"provider-health-demo-placement\"},\"subjects\":[{\"kind\":\"ServiceAccount\",\"name\":\"$sched\",\"namespace\":\"$namespace\"}]}" >/dev/null
for zone in a b c; do
	node=demo-zone-node-$zone
	kcreate /api/v1/nodes "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"$node\",\"labels\":{\"provider-health-demo\":\"zoned\",\"topology.kubernetes.io/zone\":\"demo-zone-$zone\"}}}" >/dev/null
	kpatch "/api/v1/nodes/$node/status" '{"status":{"capacity":{"cpu":"4","memory":"8Gi","pods":"110"},"allocatable":{"cpu":"4","memory":"8Gi","pods":"110"},"conditions":[{"type":"Ready","status":"True","reason":"SyntheticNode","message":"a synthetic Node of make demo: no kubelet runs it"}]}}'
	kpatch "/api/v1/nodes/$node" '{"spec":{"taints":[{"key":"provider-health-demo/zoned","effect":"NoSchedule"}]}}'
done
for proxy in a1:a a2:a a3:a a4:a a5:a a6:a b1:b c1:c; do
	kcreate "/api/v1/namespaces/$zoned/pods" "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"egress-proxy-${proxy%%:*}\",\"labels\":{\"app.kubernetes.io/managed-by\":\"egress-proxies-operator\",\"app.kubernetes.io/name\":\"egress-proxy-zoned\"}},\"spec\":{\"nodeName\":\"demo-zone-node-${proxy##*:}\",\"automountServiceAccountToken\":false,\"tolerations\":[{\"key\":\"provider-health-demo/zoned\",\"operator\":\"Exists\",\"effect\":\"NoSchedule\"}],\"containers\":[{\"name\":\"proxy\",\"image\":\"registry.example/egress-proxy:1\",\"resources\":{\"requests\":{\"cpu\":\"100m\",\"memory\":\"64Mi\"}}}]}}" >/dev/null
done
sched_token=$(kcreate "/api/v1/namespaces/$namespace/serviceaccounts/$sched/token" \
	'{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":86400}}' |
	tr -d '\n' | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p')
[ -n "$sched_token" ] || fail "no ServiceAccount token for $sched"
install -m 0600 /dev/null "$state/k8s/schedule.token"
printf '%s' "$sched_token" >"$state/k8s/schedule.token"
sed -e "s#$state/k8s/demo.token#$state/k8s/schedule.token#" -e "s#name: $account#name: $sched#; s#user: $account#user: $sched#" \
	"$state/k8s/kubeconfig" >"$state/k8s/kubeconfig-schedule"
cat >"$state/k8s/proxy-pod.yaml" <<YAML
apiVersion: v1
kind: Pod
metadata:
  generateName: egress-proxy-
  labels: {app.kubernetes.io/managed-by: egress-proxies-operator}
spec:
  automountServiceAccountToken: false
  containers:
    - name: proxy
      image: registry.example/egress-proxy:1
      resources: {requests: {cpu: "4", memory: 256Mi}}
YAML
cat >"$state/k8s/proxy-pod-per-node.yaml" <<YAML
apiVersion: v1
kind: Pod
metadata:
  generateName: egress-proxy-
  labels: {app.kubernetes.io/managed-by: egress-proxies-operator, app.kubernetes.io/name: egress-proxy}
spec:
  automountServiceAccountToken: false
  containers:
    - name: proxy
      image: registry.example/egress-proxy:1
      ports: [{containerPort: 3128, hostPort: 3128}]
      resources: {requests: {cpu: 100m, memory: 64Mi}}
  affinity:
    podAntiAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        - labelSelector: {matchLabels: {app.kubernetes.io/name: egress-proxy}}
          topologyKey: kubernetes.io/hostname
YAML

cat >"$state/k8s/proxy-pod-zoned.yaml" <<YAML
apiVersion: v1
kind: Pod
metadata:
  generateName: egress-proxy-
  labels: {app.kubernetes.io/managed-by: egress-proxies-operator, app.kubernetes.io/name: egress-proxy-zoned}
spec:
  automountServiceAccountToken: false
  nodeSelector: {provider-health-demo: zoned}
  tolerations: [{key: provider-health-demo/zoned, operator: Exists, effect: NoSchedule}]
  containers:
    - name: proxy
      image: registry.example/egress-proxy:1
      resources: {requests: {cpu: 100m, memory: 64Mi}}
  topologySpreadConstraints:
    - maxSkew: 3
      topologyKey: topology.kubernetes.io/zone
      whenUnsatisfiable: DoNotSchedule
      labelSelector: {matchLabels: {app.kubernetes.io/name: egress-proxy-zoned}}
YAML

{
	cat "$state/provider_health.base.yml"
	cat <<YAML
kubernetes:
  - name: kube-demo            # Ready: the demo's ServiceAccount may list Pods; capacity 17 (quota proxies: 3 of 20 pods)
    kubeconfig: $state/k8s/kubeconfig
    namespace: $namespace
    min_quota_headroom: {pods: 1}
  - name: kube-demo-can-i      # Forbidden: it may not create Pods in $namespace
    kubeconfig: $state/k8s/kubeconfig
    namespace: $namespace
    can_i: [create pods]
  - name: kube-demo-unschedulable   # Unschedulable: the proxy asks 4 CPUs; synthetic nodes 1 and 3 have 2, node 2 is cordoned
    kubeconfig: $state/k8s/kubeconfig-schedule
    namespace: $namespace
    pod_template: $state/k8s/proxy-pod.yaml
    schedule: true
  - name: kube-demo-proxies   # Ready, capacity 2: a host port and one proxy per node; nodes 1 and 3 take one each
    kubeconfig: $state/k8s/kubeconfig-schedule
    namespace: $namespace
    pod_template: $state/k8s/proxy-pod-per-node.yaml
    schedule: true
  - name: kube-demo-zones   # Ready, capacity 112 in three zones; losing demo-zone-a leaves 2 of its 6 proxies without a place
    kubeconfig: $state/k8s/kubeconfig-schedule
    namespace: $zoned
    pod_template: $state/k8s/proxy-pod-zoned.yaml
    schedule: true
    capacity_domain: topology.kubernetes.io/zone
YAML
} >"$state/provider_health.yml.new"
mv "$state/provider_health.yml.new" "$state/provider_health.yml"
curl -fsS --max-time 60 -X POST "$base/-/reload" >/dev/null || fail "the exporter refused the configuration with the kubernetes entries"
say "kube-apiserver and etcd on $PHE_K8S_SERVER; kube-demo, kube-demo-can-i, kube-demo-unschedulable, kube-demo-proxies (three synthetic Nodes) and kube-demo-zones (three more, one per zone) added by a reload"
