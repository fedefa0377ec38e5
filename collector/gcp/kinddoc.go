package gcp

import "github.com/egress-proxies/provider_health_exporter/provider"

// Doc is what the documentation says of the kind and of each of its
// reasons, as this kind gives them: `make generate` writes it into the
// README, docs/metrics.md, docs/configuration.md and mixin/runbook.md
// (docs/development.md: "Adding a provider").
func Doc() provider.KindDoc {
	return provider.KindDoc{
		Title:  "GCP",
		Target: "`compute`",
		Example: `  - name: crawl-prod
    project: crawl-prod-123    # Application Default Credentials; needs compute.instances.list
`,
		Reference: `  - name: crawl-prod
    project: crawl-prod-123                          # required
    credentials_file: /etc/provider_health/gcp.json  # optional; omitted = Application Default Credentials
    filter: 'labels.managed-by = "egress-proxies-operator"'   # the default
    endpoint: https://compute.googleapis.com         # optional; tests and private endpoints
    min_interval: 60s
`,
		Words: provider.KindWords{
			API:         "the Compute Engine API",
			Credentials: "the `credentials_file` or, without one, Application Default Credentials",
			Permission:  "`compute.instances.list` on the project, and what the opt-in checks add ([docs/configuration.md](docs/configuration.md#gcp)).",
			Status:      "check the Google Cloud status page, and the project's API quota (`gcloud services quota`), which a 429 may have spent.",
		},
		Reasons: map[provider.Reason]provider.ReasonDoc{
			provider.ReasonReady: {
				Means:  "Compute listed instances (zero matching is fine)",
				Action: "—",
			},
			provider.ReasonTimeout: {
				Means:  "no answer within the budget",
				Action: "Check egress to `compute.googleapis.com` (proxy, firewall); raise `timeout` or the scrape timeout if Compute is just slow",
			},
			provider.ReasonUnreachable: {
				Means:  "TCP refused/reset/unreachable, or the connection dropped before an answer",
				Action: "Egress firewall, proxy, `endpoint` typo",
			},
			provider.ReasonDNSFailed: {
				Means:  "the endpoint's name did not resolve",
				Action: "DNS of the exporter's host; `endpoint` typo; private Google access DNS zones",
			},
			provider.ReasonTLSError: {
				Means:  "certificate not trusted, wrong name, handshake failed, or an HTTP answer to HTTPS",
				Action: "A TLS-intercepting proxy needs its CA in the system trust store; `endpoint` scheme",
			},
			provider.ReasonCredentialsUnavailable: {
				Means:  "no credentials found, the credentials file is unreadable or broken, or the token fetch failed (also when the token endpoint or metadata server cannot be reached)",
				Action: "Fix or rotate the key file; on GCE/GKE check the VM's service account / Workload Identity binding; the message says which step failed",
			},
			provider.ReasonUnauthorized: {
				Means:  "401: Compute rejected the token",
				Action: "Key deleted or disabled, service account deleted; rotate the key",
			},
			provider.ReasonForbidden: {
				Means:  "403 other than a disabled API: the identity lacks `compute.instances.list`, or, for the opt-in checks, `compute.regions.get` (`regions`), `compute.images.get` or `compute.images.getFromFamily` on the image's project (`source_image`)",
				Action: "Grant `roles/compute.viewer` or a custom role with the permission on the project (and on the image's project); the operator lacks it too",
			},
			ReasonAPIDisabled: {
				Means:   "403 `accessNotConfigured` / `SERVICE_DISABLED`: the Compute Engine API is not enabled",
				Action:  "`gcloud services enable compute.googleapis.com --project <project>`; wait a few minutes: waiting alone does not fix it",
				Runbook: "the Compute Engine API is disabled in the project.",
			},
			provider.ReasonNotFound: {
				Means:  "404: no such project (or not visible to the identity)",
				Action: "Check `project` (the ID, not the name or number)",
			},
			provider.ReasonInvalidRequest: {
				Means:  "400: typically the `filter` does not parse",
				Action: "Fix `filter`",
			},
			provider.ReasonRateLimited: {
				Means:  "429, or 403 `rateLimitExceeded`, or `RESOURCE_EXHAUSTED`: the project's Compute read quota is spent",
				Action: "Raise `min_interval`; find the other heavy readers of the project; request more quota",
			},
			provider.ReasonServerError: {
				Means:  "5xx from Compute or from a proxy in between (also non-JSON pages)",
				Action: "Usually transient; check the Google Cloud status page if it persists",
			},
			provider.ReasonBadResponse: {
				Means:  "a 200 that is not an instance aggregated list (truncated, HTML, another kind)",
				Action: "Something other than Compute answers at `endpoint` (captive portal, wrong path on a private endpoint)",
			},
			ReasonQuotaExhausted: {
				Means:   "a configured region's Compute quota leaves less of a metric than `min_quota_headroom` asks; checked only once the list passed, and a region without quota data is not this reason; only with `regions` and `min_quota_headroom`",
				Action:  "Free what is no longer used in that region, or request more quota for the region and metric the message names (console: IAM & Admin → Quotas)",
				Runbook: runbookQuota,
			},
			ReasonRegionDown: {
				Means:   "Compute reports a configured region's `status` as `DOWN` (read by the same `regions.get` as the quotas); it wins over `QuotaExhausted`; only with `regions`",
				Action:  "A regional outage: check the Google Cloud status page; place proxies in another region until it is `UP` again, or drop the region from `regions` if you no longer use it",
				Runbook: "Compute reports one of the entry's `regions` as `DOWN` (the message names it): a regional outage. Check the Google Cloud status page; the operator cannot place proxies there until the region is `UP`, so place them in another region meanwhile. It clears by itself; remove the region from `regions` only if it is no longer used.",
			},
			ReasonImageUnavailable: {
				Means:   "`source_image` is not found (404), or deprecated to `OBSOLETE` or `DELETED`: every instance insert from it fails. `DEPRECATED` stays `Ready`, with the replacement in the message and details; checked only once the list, regions and quotas passed; only with `source_image`",
				Action:  "Point `source_image` and the operator's instance template at the replacement the message names, or at an image family; `gcloud compute images describe IMAGE --project PROJECT` shows the deprecation, `gcloud compute images describe-from-family FAMILY --project PROJECT` what a family resolves to",
				Runbook: "the configured `source_image` is gone (404) or `OBSOLETE`/`DELETED`; every instance insert from it fails. The message names the replacement Compute gives (`gcloud compute images describe IMAGE --project PROJECT`). A `DEPRECATED` image is still `Ready`, with the replacement in the message: the time to move is before it turns `OBSOLETE`.",
			},
			provider.ReasonUnknown: {
				Means:  "anything else (logged at warn with the error)",
				Action: "Read the log line",
			},
		},
	}
}

// runbookQuota is the runbook's item of QuotaExhausted, which says the
// same for Kubernetes' quotas.
const runbookQuota = "the API answered, but a configured `min_quota_headroom` is not met; the message says what was found and what is required. It is usually announced first by `ProviderQuotaNearLimit`: follow that runbook."
