package toykind

import (
	"slices"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// Name is the section key and provider label.
const Name = "toy"

// ReasonHTTPError is the reason of a URL that answered with a status
// other than 200. The server answered, so it is up.
const ReasonHTTPError provider.Reason = "HTTPError"

// Reasons is the kind's closed set: the engine's, the network's (the
// checker dials the URL's host) and the kind's own. Kind adds the reasons
// of the TransportErrors classifier its checker calls (TLSError, BadResponse).
func Reasons() provider.ReasonSet {
	return slices.Concat(provider.EngineReasons(), provider.NetworkReasons(),
		provider.ReasonSet{{Reason: ReasonHTTPError, Up: true}, provider.UnknownReason()})
}
