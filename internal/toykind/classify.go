package toykind

import (
	"slices"

	"github.com/egress-proxies/provider_health_exporter/collector"
)

// Name is the section key and provider label.
const Name = "toy"

// ReasonHTTPError is the reason of a URL that answered with a status
// other than 200. The server answered, so it is up.
const ReasonHTTPError collector.Reason = "HTTPError"

// Reasons is the kind's closed set: the engine's, the network's (the
// checker dials the URL's host) and the kind's own. Kind adds the reasons
// of the Transport classifier its checker calls (TLSError, BadResponse).
func Reasons() collector.ReasonSet {
	return slices.Concat(collector.EngineReasons(), collector.NetworkReasons(),
		collector.ReasonSet{{Reason: ReasonHTTPError, Up: true}, collector.UnknownReason()})
}
