package provider

// SharedReasonDocs describes each reason of the shared vocabulary as any
// kind may give it, in the vocabulary's order: the first table of
// docs/metrics.md's "Reasons", and the description of such a reason in a
// kind's own table where the kind has none of its own (KindDoc.Reasons).
// Held here, beside the vocabulary (reason.go), and written into the docs
// by `make generate`.
func SharedReasonDocs() []ReasonDocOf {
	// Reasons of one runbook item share its text.
	const (
		runbookNetwork  = "network path or name resolution from the exporter's host to the target address (`provider_health_target_info`)."
		runbookDegraded = "the provider's API is degraded; check its status page, and for GCP the project's quota. Raising `min_interval` lowers the exporter's own API use."
		runbookIdentity = "the identity is not accepted, or lacks the permission to list Pods cluster-wide (Kubernetes) or instances (`compute.instances.list`, GCP). A Kubernetes `Forbidden` whose message reads \"cannot VERB RESOURCE in namespace NS\" comes from a `can_i` entry: the list call passed, but the operator's own permission (checked with a SelfSubjectAccessReview as the exporter's identity) is missing; compare `kubectl auth can-i VERB RESOURCE -n NS --as system:serviceaccount:...`."
	)
	return []ReasonDocOf{
		{ReasonReady, ReasonDoc{
			Means:  "the check passed (zero managed Pods/instances is still Ready)",
			Action: "nothing",
		}},
		{ReasonTimeout, ReasonDoc{
			Means:   "the budget ran out, whatever the error said",
			Action:  "compare `check_duration_seconds` with `check_timeout_seconds`; an overloaded API or a host that accepts TCP but never speaks; raise `scrape_timeout`/`timeout` only if the provider is merely slow",
			Runbook: "the check did not finish within the scrape's budget. Compare `provider_health_check_duration_seconds` with `provider_health_check_timeout_seconds` on the dashboard; a slow API or a too short `scrape_timeout`.",
		}},
		{ReasonUnreachable, ReasonDoc{
			Means:   "TCP refused, reset or unreachable; connection dropped before an answer",
			Action:  "is the API server / sshd running, the address and port right, a firewall in the way?",
			Runbook: runbookNetwork,
		}},
		{ReasonDNSFailed, ReasonDoc{
			Means:   "the name did not resolve",
			Action:  "fix the address or the exporter's DNS",
			Runbook: runbookNetwork,
		}},
		{ReasonTLSError, ReasonDoc{
			Means:   "certificate unknown or for another name, handshake failed, HTTP answer to HTTPS",
			Action:  "update the CA after a rotation; check `server:`/`endpoint:`; look for an intercepting proxy",
			Runbook: "certificate or CA mismatch, or plain HTTP answering HTTPS.",
		}},
		{ReasonCredentialsUnavailable, ReasonDoc{
			Means:   "no credentials: token fetch failed, no default credentials, exec plugin failed, not in a cluster",
			Action:  "fix the credentials file, kubeconfig, exec plugin or service-account mount",
			Runbook: "no token could be obtained (GCP credentials file or Application Default Credentials, kubeconfig exec plugin, not running in a cluster).",
		}},
		{ReasonUnauthorized, ReasonDoc{
			Means:   "401",
			Action:  "credentials expired or revoked: issue new ones",
			Runbook: runbookIdentity,
		}},
		{ReasonForbidden, ReasonDoc{
			Means:   "403 other than a disabled API: the identity lacks a permission a step of the check needs (the message names it)",
			Action:  "grant the permission the message names (each kind's section of [docs/configuration.md](docs/configuration.md#configuration) lists what its checks need); the operator lacks it too",
			Runbook: runbookIdentity,
		}},
		{ReasonNotFound, ReasonDoc{
			Means:   "404",
			Action:  "wrong project ID, or the address is not the API's root",
			Runbook: "the project or API path does not exist.",
		}},
		{ReasonInvalidRequest, ReasonDoc{
			Means:   "400 (bad selector or filter)",
			Action:  "fix `label_selector` / `filter`; the message has the server's words",
			Runbook: "the configured `label_selector` or `filter` is invalid.",
		}},
		{ReasonRateLimited, ReasonDoc{
			Means:   "429, `rateLimitExceeded`, `RESOURCE_EXHAUSTED`",
			Action:  "the API is shedding load or the quota is spent; raise `min_interval` (GCP), check API Priority and Fairness (Kubernetes)",
			Runbook: runbookDegraded,
		}},
		{ReasonServerError, ReasonDoc{
			Means:   "5xx",
			Action:  "provider-side trouble: look at the API server/etcd, or GCP's status",
			Runbook: runbookDegraded,
		}},
		{ReasonBadResponse, ReasonDoc{
			Means:   "an answer that does not decode, is over its size limit, or holds a quantity no cluster could mean (beyond 10^±64, e.g. a ResourceQuota of `1e1000000000`)",
			Action:  "something other than the API answers at that address (a proxy, a captive portal), or the API server or an admission webhook wrote a broken object: the message names it ([docs/security.md](docs/security.md#strings-labels-and-pages))",
			Runbook: runbookDegraded,
		}},
		{ReasonUnknown, ReasonDoc{
			Means:   "anything else, logged with the error (also a checker that panicked)",
			Action:  "read the message (`/probe?name=…&debug=true`) and the log; report it",
			Runbook: "the exporter's log has the unclassified error; file an issue with it.",
		}},
	}
}
