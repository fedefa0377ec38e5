package toykind

import "github.com/egress-proxies/provider_health_exporter/provider"

// Doc is what the documentation says of the kind and of its own reason;
// the shared reasons keep their shared description, in the kind's words. `make generate`
// writes it into the docs of a binary that has the kind in its table
// (docs/development.md: "Adding a provider").
func Doc() provider.KindDoc {
	return provider.KindDoc{
		Title:  "Toy",
		Target: "`url`",
		Example: `  - name: intranet
    url: https://intranet.example/healthz
`,
		Reference: `  - name: intranet                       # required, unique in the file
    url: https://intranet.example/healthz  # required: must answer 200
    resolver: 127.0.0.1:53                 # optional: the DNS server to ask instead of the system's
`,
		// The shared reasons' texts in the kind's words: BadResponse's
		// runbook item names the API and where to look.
		Words: provider.KindWords{
			API:    "the server behind `url`",
			Status: "check that server, and what answers at its address (a proxy, a captive portal).",
		},
		Reasons: map[provider.Reason]provider.ReasonDoc{
			ReasonHTTPError: {
				Means:  "the URL answered with a status other than 200",
				Action: "the message has the status: fix the service behind the URL, or `url`",
			},
		},
	}
}
