package kubernetes

import "github.com/egress-proxies/provider_health_exporter/provider"

// Doc is what the documentation says of the kind and of each of its
// reasons, as this kind gives them: `make generate` writes it into the
// RE"the list and the headroom checks passed, but the API server's admission chain refused the dry-run create (`dryRun=All`; nothing was created) of the operator's proxy Pod, `pod_template`; the operator's own create fails the same way. The message quotes the API server and names the plugin, webhook or policy; `dryRun` under `details` in `/api/v1/status` has it with its time. Reproduce it as the operator would: `kubectl create --dry-run=server -n NAMESPACE -f TEMPLATE`. By what the message names:\n  - `PodSecurity` (\"violates PodSecurity \"restricted:latest\": ...\"): the Pod does not meet the namespace's `pod-security.kubernetes.io/enforce` level; the message lists each violation (`runAsNonRoot`, `allowPrivilegeEscalation`, `capabilities`, `seccompProfile`).\n  - `LimitRanger` (\"maximum cpu usage per Container is 500m, but limit is 1\"): `kubectl -n NAMESPACE describe limitrange`.\n  - `ServiceAccount` (\"serviceaccount \"default\" not found\"): the ServiceAccount the Pod runs as is missing; the controller-manager creates `default` in every namespace, so its absence also hints at a controller-manager problem.\n  - `admission webhook \"NAME\"` or `ValidatingAdmissionPolicy 'NAME'`: the policy (Kyverno, Gatekeeper, your own) refuses the Pod for the reason quoted; \"could not be called and fails closed\": the webhook's service is down and its `failurePolicy` is `Fail`.\n  - \"cannot take a dry run\": a webhook with `sideEffects: Unknown` or `Some` matches the Pod; the API server refuses every dry run it would see, so the exporter cannot judge placement there.\n  - \"the Pod is invalid as admission leaves it\": a mutating webhook or the template itself makes an invalid Pod; the message has the field."E, docs/metrics.md, docs/configuration.md and mixin/runbook.md
// (docs/development.md: "Adding a provider").
func Doc() provider.KindDoc {
	return provider.KindDoc{
		Title:  "Kubernetes",
		Target: "`apiserver`",
		Example: `  - name: prod-cluster     # in-cluster config; lists Pods labelled app.kubernetes.io/managed-by=egress-proxies-operator
`,
		Reference: `  - name: prod-cluster     # required, unique across the whole file; label name="..."
    kubeconfig: /etc/provider_health/kubeconfig  # optional; omitted = in-cluster config
    context: prod          # optional kubeconfig context
    label_selector: app.kubernetes.io/managed-by=egress-proxies-operator   # the default
    timeout: 5s            # optional override; min_interval likewise
`,
		Words: provider.KindWords{
			API:         "the API server",
			Credentials: "the kubeconfig (its exec credential plugin, its token or certificate files) or, without one, the in-cluster ServiceAccount token (is the exporter running in a cluster, with `automountServiceAccountToken`?)",
			Permission:  "listing Pods cluster-wide, and what `min_quota_headroom`, `pod_template` and `schedule` add ([docs/configuration.md](docs/configuration.md#kubernetes)). A `Forbidden` whose message reads \"cannot VERB RESOURCE in namespace NS\" comes from a `can_i` entry: the list call passed, but the operator's own permission (checked with a SelfSubjectAccessReview as the exporter's identity) is missing; compare `kubectl auth can-i VERB RESOURCE -n NS --as system:serviceaccount:...`.",
			Status:      "look at the API server's and etcd's health, and at API Priority and Fairness, which answers 429 when it sheds load.",
		},
		Reasons: map[provider.Reason]provider.ReasonDoc{
			provider.ReasonReady: {
				Means:  "the API server listed Pods for us (zero matching Pods included)",
				Action: "nothing",
			},
			provider.ReasonTimeout: {
				Means:  "no answer within the budget (also a TCP or TLS handshake that timed out)",
				Action: "API server overloaded or network slow; compare `check_duration_seconds` with `check_timeout_seconds`; raise `scrape_timeout`/`timeout` only if the API is merely slow",
			},
			provider.ReasonUnreachable: {
				Means:  "connection refused/reset/no route, or closed before an answer",
				Action: "API server down, wrong host/port in the kubeconfig, firewall, load balancer without backends",
			},
			provider.ReasonDNSFailed: {
				Means:  "the API server's name did not resolve",
				Action: "check the kubeconfig `server:` name and the exporter's DNS",
			},
			provider.ReasonTLSError: {
				Means:  "certificate not signed by the configured CA, name not in the certificate, handshake rejected, or an HTTP answer to HTTPS",
				Action: "update `certificate-authority(-data)` after a CA rotation; fix `server:`/`tls-server-name`; check for a proxy in front of the API server",
			},
			provider.ReasonCredentialsUnavailable: {
				Means:  "no credentials could be obtained: kubeconfig unparsable or context missing, token file unreadable, exec credential plugin failed or missing, not running in a cluster without a kubeconfig",
				Action: "fix the kubeconfig; install/repair the exec plugin (e.g. cloud login helper) in the image; mount the ServiceAccount token (`automountServiceAccountToken: true`) or configure a kubeconfig",
			},
			provider.ReasonUnauthorized: {
				Means:  "401: the API server did not accept the credentials",
				Action: "token expired or revoked, ServiceAccount deleted, client certificate expired; issue new credentials",
			},
			provider.ReasonForbidden: {
				Means:  "403: authenticated, but RBAC does not allow listing Pods cluster-wide (or listing the ResourceQuotas of `namespace`); or a `can_i` review said no; or RBAC refused the `pod_template` dry run (\"cannot create pods in namespace ...\"); or `schedule` may not watch Nodes or Pods (\"cannot list/watch nodes cluster-wide\")",
				Action: "apply the ClusterRole/ClusterRoleBinding above for the identity named in the message — the operator lacks the same access; for `can_i`, grant what the message names in `namespace`; for `pod_template`, `create pods` in `namespace` (`components/placement`); for `schedule`, `list`/`watch` on `nodes` and `pods` (`components/schedule`)",
			},
			ReasonQuotaExhausted: {
				Means:   "a ResourceQuota of `namespace` leaves less of a resource than `min_quota_headroom` asks (checked only once the list passed), or the ResourceQuota admission refused the `pod_template` dry run (`exceeded quota`); only with `min_quota_headroom` or `pod_template`",
				Action:  "free capacity (delete what is no longer needed) or raise the quota: `kubectl -n <namespace> describe resourcequota`",
				Runbook: runbookQuota,
			},
			ReasonAdmissionDenied: {
				Means:   "the `pod_template` dry run (`POST …/pods?dryRun=All`, after the list, `can_i` and `min_quota_headroom` passed) was refused by admission: PodSecurity, LimitRanger, the ServiceAccount admission, a validating or mutating webhook or an admission policy, a 422 after mutation, or a webhook that cannot take a dry run. The message quotes the API server and names the plugin, webhook or policy. RBAC's refusal is `Forbidden`, the ResourceQuota admission's `QuotaExhausted`; only with `pod_template`",
				Action:  "the operator's create fails the same way: fix what the message names. PodSecurity: make the template meet the namespace's `pod-security.kubernetes.io/enforce` level (`runAsNonRoot`, `allowPrivilegeEscalation: false`, `capabilities.drop: [ALL]`, `seccompProfile`), or change the level; LimitRanger: fit the template's requests/limits to `kubectl -n <namespace> describe limitrange`; ServiceAccount: create the ServiceAccount the Pod names (`default` is made by the controller-manager); a webhook or policy: allow what it refuses (the image, say), or fix it if it could not be called; \"cannot take a dry run\": set the webhook's `sideEffects: None` (or `NoneOnDryRun`)",
				Runbook: runbookAdmissionDenied,
			},
			ReasonUnschedulable: {
				Means:   "`schedule`: admission took the `pod_template` Pod, but no node would run it: fitted on the watch caches of Nodes and Pods as kube-scheduler's filters do (cordoned nodes, `NoSchedule`/`NoExecute` taints, `nodeSelector` and required node affinity, host ports, allocatable less the requests of the Pods bound to the node, its pod count, `DoNotSchedule` topology spread, required inter-Pod affinity and anti-affinity), every node refuses it. The message counts the nodes per cause as the scheduler's `FailedScheduling` event does (\"0/5 nodes are available: 2 Insufficient cpu, 1 node(s) had untolerated taint {dedicated: gpu}, 1 node(s) were unschedulable, 1 node(s) didn't match Pod's node affinity/selector\"); the dry run's reasons win over it; only with `schedule`",
				Action:  "the operator's proxies would stay `Pending`: by cause, add nodes or free their requests (`kubectl describe node`, \"Allocated resources\"), uncordon nodes after a drain, tolerate the taint in the template only if proxies belong on those nodes, fix the template's `nodeSelector`/affinity or label nodes ([Scheduling](docs/configuration.md#scheduling-schedule), [runbook](mixin/runbook.md#providernotready))",
				Runbook: runbookUnschedulable,
			},
			provider.ReasonNotFound: {
				Means:  "404: the Pods endpoint is not there",
				Action: "`server:` points at something that is not a kube-apiserver root (a path prefix, another service)",
			},
			provider.ReasonInvalidRequest: {
				Means:  "400/422: the API server rejected the request, usually an unparsable `label_selector`",
				Action: "fix `label_selector` (message has the parser's error)",
			},
			provider.ReasonRateLimited: {
				Means:  "429: API Priority and Fairness or a proxy rejected the request",
				Action: "the API server is shedding load; check its APF metrics; the exporter does not retry, the next scrape checks again",
			},
			provider.ReasonServerError: {
				Means:  "5xx (including 503 while the API server shuts down or etcd is unavailable)",
				Action: "look at the API server and etcd",
			},
			provider.ReasonBadResponse: {
				Means:  "a 2xx answer that is not a PodList, or a body cut off mid-way",
				Action: "something that is not a kube-apiserver (or a misbehaving proxy) answers at that address",
			},
			provider.ReasonUnknown: {
				Means:  "anything else (e.g. an unexpected 409), logged with the error",
				Action: "read the message / logs; report it",
			},
		},
	}
}

// The runbook's items of the kind's own reasons.
const (
	runbookQuota = "the API answered, but a configured `min_quota_headroom` is not met; the message says what was found and what is required. It is usually announced first by `ProviderQuotaNearLimit`: follow that runbook."

	runbookAdmissionDenied = "the list and the headroom checks passed, but the API server's admission chain refused the dry-run create (`dryRun=All`; nothing was created) of the operator's proxy Pod, `pod_template`; the operator's own create fails the same way. The message quotes the API server and names the plugin, webhook or policy; `dryRun` under `details` in `/api/v1/status` has it with its time. Reproduce it as the operator would: `kubectl create --dry-run=server -n NAMESPACE -f TEMPLATE`. By what the message names:\n  - `PodSecurity` (\"violates PodSecurity \"restricted:latest\": ...\"): the Pod does not meet the namespace's `pod-security.kubernetes.io/enforce` level; the message lists each violation (`runAsNonRoot`, `allowPrivilegeEscalation`, `capabilities`, `seccompProfile`).\n  - `LimitRanger` (\"maximum cpu usage per Container is 500m, but limit is 1\"): `kubectl -n NAMESPACE describe limitrange`.\n  - `ServiceAccount` (\"serviceaccount \"default\" not found\"): the ServiceAccount the Pod runs as is missing; the controller-manager creates `default` in every namespace, so its absence also hints at a controller-manager problem.\n  - `admission webhook \"NAME\"` or `ValidatingAdmissionPolicy 'NAME'`: the policy (Kyverno, Gatekeeper, your own) refuses the Pod for the reason quoted; \"could not be called and fails closed\": the webhook's service is down and its `failurePolicy` is `Fail`.\n  - \"cannot take a dry run\": a webhook with `sideEffects: Unknown` or `Some` matches the Pod; the API server refuses every dry run it would see, so the exporter cannot judge placement there.\n  - \"the Pod is invalid as admission leaves it\": a mutating webhook or the template itself makes an invalid Pod; the message has the field."

	runbookUnschedulable = "admission takes the operator's proxy Pod, but no node would run it: fitted on the exporter's watch caches of Nodes and Pods as kube-scheduler's filters do, every node refuses it. The message counts the nodes per cause in the scheduler's words, as the Pod's `FailedScheduling` event would (\"0/5 nodes are available: 2 Insufficient cpu, 1 node(s) had untolerated taint {dedicated: gpu}, 1 node(s) were unschedulable, 1 node(s) didn't match Pod's node affinity/selector\"); `schedule` under `details` in `/api/v1/status` has it with its time. By cause:\n  - `Insufficient cpu` / `memory` / `ephemeral-storage` / an extended resource, `Too many pods`: the nodes' allocatable is taken by the requests of the Pods bound to them (`kubectl describe node NODE`, \"Allocated resources\"). Add nodes (or let the cluster autoscaler do it: check its status), delete finished or unneeded Pods, or lower the proxy's requests in the template if they are larger than it needs.\n  - `had untolerated taint {KEY: VALUE}`: the nodes with room are tainted for other workloads (`kubectl get nodes -o custom-columns=NAME:.metadata.name,TAINTS:.spec.taints`); add a toleration to the template only if proxies belong there.\n  - `were unschedulable`: the nodes are cordoned (`kubectl get nodes`, `SchedulingDisabled`), often a drain or an upgrade in progress; `kubectl uncordon NODE` when it is over.\n  - `didn't match Pod's node affinity/selector`: the template's `nodeSelector` or required node affinity matches no node with room (`kubectl get nodes --show-labels`); label nodes or fix the template.\n  - `didn't have free ports for the requested pod ports`: another Pod (often an earlier proxy) holds the template's `hostPort` (or, with `hostNetwork`, its container port) on those nodes: one such proxy per node; add nodes or free the port.\n  - `didn't match pod anti-affinity rules` / `didn't satisfy existing pods anti-affinity rules`: the template's required anti-affinity (one proxy per node or zone), or a bound Pod's, keeps it off those nodes; every node or zone already runs one: add nodes or zones.\n  - `didn't match pod topology spread constraints`: a `DoNotSchedule` spread would exceed its `maxSkew` (a zone that takes no proxy holds the others back; `minDomains` counts missing zones as empty). Once nodes are free again it clears by itself at the next scrape. A `Forbidden` that names \"list/watch nodes\" or \"pods\" (or \"list namespaces\", for a `namespaceSelector` term) means the exporter may not read them: apply `deploy/kubernetes/components/schedule` (Helm: `rbac.schedule.enabled`)."
)
