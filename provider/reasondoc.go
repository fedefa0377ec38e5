package provider

// SharedReasonDocs describes each reason of the shared vocabulary as any
// kind may give it, in the vocabulary's order: the first table of
// docs/metrics.md's "Reasons", and the description of such a reason in a
// kind's own table where the kind has none of its own (KindDoc.Reasons).
// Held here, beside the vocabulary (reason.go), and written into the docs
// by `make generate`. The texts name no kind: where a kind's word is
// needed (which API, which credentials, which permission), they hold its
// placeholder, and a kind's description is composed with its
// KindDoc.Words (Kind.ReasonDoc, Kind.RunbookText).
func SharedReasonDocs() []ReasonDocOf {
	// Reasons of one runbook item share its text.
	const (
		runbookNetwork  = "network path or name resolution from the exporter's host to the target address (`provider_health_target_info`)."
		runbookDegraded = "{api} is degraded, or something else answers at its address; {status} Raising `min_interval` lowers the exporter's own API use."
		runbookIdentity = "the identity is not accepted, or lacks a permission a step of the check needs (the message names it): {permission}"
	)
	return []ReasonDocOf{
		{ReasonReady, ReasonDoc{
			Means:  "the check passed (nothing managed yet is still Ready)",
			Action: "nothing",
		}},
		{ReasonTimeout, ReasonDoc{
			Means:   "the budget ran out, whatever the error said",
			Action:  "compare `check_duration_seconds` with `check_timeout_seconds`; an overloaded API or a host that accepts TCP but never speaks; raise `scrape_timeout`/`timeout` only if the provider is merely slow",
			Runbook: "the check did not finish within the scrape's budget. Compare `provider_health_check_duration_seconds` with `provider_health_check_timeout_seconds` on the dashboard; a slow API or a too short `scrape_timeout`.",
		}},
		{ReasonUnreachable, ReasonDoc{
			Means:   "TCP refused, reset or unreachable; connection dropped before an answer",
			Action:  "is the service at the address running, the address and port right, a firewall in the way?",
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
			Means:   "no credentials could be obtained: a credentials file unreadable, a token fetch or a credential plugin failed, none configured",
			Action:  "fix the credentials the message names",
			Runbook: "no credentials could be obtained from {credentials}.",
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
			Action:  "what the entry names does not exist, or the address is not the API's root",
			Runbook: "{api} has no such path: what the entry names does not exist, or the address is not the API's root.",
		}},
		{ReasonInvalidRequest, ReasonDoc{
			Means:   "400 (bad selector or filter)",
			Action:  "fix the entry's selector or filter; the message has the server's words",
			Runbook: "{api} refused the request as invalid: a selector or filter of the entry it cannot parse; the message has its words.",
		}},
		{ReasonRateLimited, ReasonDoc{
			Means:   "429, `rateLimitExceeded`, `RESOURCE_EXHAUSTED`",
			Action:  "the API is shedding load or its quota is spent; the exporter does not retry, raise `min_interval` to call it less",
			Runbook: runbookDegraded,
		}},
		{ReasonServerError, ReasonDoc{
			Means:   "5xx",
			Action:  "provider-side trouble: look at the API's health or its status page",
			Runbook: runbookDegraded,
		}},
		{ReasonBadResponse, ReasonDoc{
			Means:   "an answer that does not decode, is over its size limit, or holds a quantity no API could mean (beyond 10^±64, e.g. `1e1000000000`)",
			Action:  "something other than the API answers at that address (a proxy, a captive portal), or the API wrote a broken object: the message names it ([docs/security.md](docs/security.md#strings-labels-and-pages))",
			Runbook: runbookDegraded,
		}},
		{ReasonUnknown, ReasonDoc{
			Means:   "anything else, logged with the error (also a checker that panicked)",
			Action:  "read the message (`/probe?name=…&debug=true`) and the log; report it",
			Runbook: "the exporter's log has the unclassified error; file an issue with it.",
		}},
	}
}
