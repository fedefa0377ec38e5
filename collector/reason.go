package collector

// Reason says in one bounded CamelCase word why a target is or is not ready.
// Each provider has a closed set (README: "Reasons"); every reason of the set is
// exported on every scrape as a state set, so the set must never grow at run
// time.
type Reason string

// The reasons of the README's "Reasons".
const (
	ReasonReady                    Reason = "Ready"
	ReasonTimeout                  Reason = "Timeout"
	ReasonUnreachable              Reason = "Unreachable"
	ReasonDNSFailed                Reason = "DNSFailed"
	ReasonTLSError                 Reason = "TLSError"
	ReasonCredentialsUnavailable   Reason = "CredentialsUnavailable"
	ReasonUnauthorized             Reason = "Unauthorized"
	ReasonForbidden                Reason = "Forbidden"
	ReasonAPIDisabled              Reason = "APIDisabled"
	ReasonNotFound                 Reason = "NotFound"
	ReasonInvalidRequest           Reason = "InvalidRequest"
	ReasonRateLimited              Reason = "RateLimited"
	ReasonServerError              Reason = "ServerError"
	ReasonBadResponse              Reason = "BadResponse"
	ReasonSSHMaterialInvalid       Reason = "SSHMaterialInvalid"
	ReasonSSHAuthFailed            Reason = "SSHAuthFailed"
	ReasonSSHHandshakeFailed       Reason = "SSHHandshakeFailed"
	ReasonHostKeyUnknown           Reason = "HostKeyUnknown"
	ReasonHostKeyMismatch          Reason = "HostKeyMismatch"
	ReasonLibvirtSocketUnavailable Reason = "LibvirtSocketUnavailable"
	ReasonLibvirtConnectFailed     Reason = "LibvirtConnectFailed"
	ReasonLibvirtConnectionLost    Reason = "LibvirtConnectionLost"
	ReasonPoolMissing              Reason = "PoolMissing"
	ReasonPoolInactive             Reason = "PoolInactive"
	ReasonPoolBuilding             Reason = "PoolBuilding"
	ReasonPoolDegraded             Reason = "PoolDegraded"
	ReasonPoolInaccessible         Reason = "PoolInaccessible"
	ReasonUnknown                  Reason = "Unknown"
)

// Provider kinds, used as the provider label.
const (
	ProviderKubernetes = "kubernetes"
	ProviderGCP        = "gcp"
	ProviderKVM        = "kvm"
)

// up tells whether a reason means the provider's API answered at its own
// protocol level (README: "Metrics", "Reasons"): an HTTP status from the API, a libvirt reply.
var up = map[Reason]bool{
	ReasonReady:                true,
	ReasonUnauthorized:         true,
	ReasonForbidden:            true,
	ReasonAPIDisabled:          true,
	ReasonNotFound:             true,
	ReasonInvalidRequest:       true,
	ReasonRateLimited:          true,
	ReasonServerError:          true,
	ReasonBadResponse:          true,
	ReasonLibvirtConnectFailed: true,
	ReasonPoolMissing:          true,
	ReasonPoolInactive:         true,
	ReasonPoolBuilding:         true,
	ReasonPoolDegraded:         true,
	ReasonPoolInaccessible:     true,
}

// Up reports whether the provider's API answered when the verdict is r.
func (r Reason) Up() bool { return up[r] }

// Ready reports whether the provider can host proxies when the verdict is r.
func (r Reason) Ready() bool { return r == ReasonReady }

var (
	httpReasons = []Reason{
		ReasonReady, ReasonTimeout, ReasonUnreachable, ReasonDNSFailed, ReasonTLSError,
		ReasonCredentialsUnavailable, ReasonUnauthorized, ReasonForbidden,
	}
	httpTail = []Reason{
		ReasonNotFound, ReasonInvalidRequest, ReasonRateLimited, ReasonServerError,
		ReasonBadResponse, ReasonUnknown,
	}

	reasonSets = map[string][]Reason{
		ProviderKubernetes: concat(httpReasons, httpTail),
		ProviderGCP:        concat(httpReasons, []Reason{ReasonAPIDisabled}, httpTail),
		ProviderKVM: {
			ReasonReady, ReasonTimeout, ReasonUnreachable, ReasonDNSFailed,
			ReasonSSHMaterialInvalid, ReasonSSHAuthFailed, ReasonSSHHandshakeFailed,
			ReasonHostKeyUnknown, ReasonHostKeyMismatch, ReasonLibvirtSocketUnavailable,
			ReasonLibvirtConnectFailed, ReasonLibvirtConnectionLost, ReasonPoolMissing,
			ReasonPoolInactive, ReasonPoolBuilding, ReasonPoolDegraded, ReasonPoolInaccessible,
			ReasonUnknown,
		},
	}
)

func concat(parts ...[]Reason) []Reason {
	var out []Reason
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// Reasons returns the closed reason set of a provider kind, in a stable
// order. The caller must not modify it.
func Reasons(provider string) []Reason { return reasonSets[provider] }

// InSet reports whether r belongs to the reason set of provider.
func InSet(provider string, r Reason) bool {
	for _, x := range reasonSets[provider] {
		if x == r {
			return true
		}
	}
	return false
}
