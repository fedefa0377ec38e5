package collector

// Reason says in one bounded CamelCase word why a target is or is not ready.
// Each provider has a closed set (docs/metrics.md: "Reasons"); every reason of the set is
// exported on every scrape as a state set, so the set must never grow at run
// time.
type Reason string

// The reasons of docs/metrics.md's "Reasons".
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
// protocol level (docs/metrics.md: "Metrics", "Reasons"): an HTTP status from the API, a libvirt reply.
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

// HTTPReasons is the reason set of a provider behind an HTTP API, with
// the provider's own extra reasons (gcp: APIDisabled) before the HTTP
// status reasons. Each provider package declares its set (docs/metrics.md:
// "Reasons"); the framework only emits what the entry says.
func HTTPReasons(extra ...Reason) []Reason {
	out := []Reason{
		ReasonReady, ReasonTimeout, ReasonUnreachable, ReasonDNSFailed, ReasonTLSError,
		ReasonCredentialsUnavailable, ReasonUnauthorized, ReasonForbidden,
	}
	out = append(out, extra...)
	return append(out,
		ReasonNotFound, ReasonInvalidRequest, ReasonRateLimited, ReasonServerError,
		ReasonBadResponse, ReasonUnknown)
}
