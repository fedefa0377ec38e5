package provider

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Reason says in one bounded CamelCase word why a target is or is not ready.
// Each provider kind has a closed set (docs/metrics.md: "Reasons"), checked at
// startup and listed in /api/v1/status; only a target's current reason is
// exported, and it is always one of its entry's set, so the values the
// reason label can take are known before any check runs.
type Reason string

// The shared vocabulary of docs/metrics.md's "Reasons": what any kind may say.
// A kind's own reasons (the states of a host's storage, a cloud API
// being disabled) are declared in its package.
const (
	ReasonReady                  Reason = "Ready"
	ReasonTimeout                Reason = "Timeout"
	ReasonUnreachable            Reason = "Unreachable"
	ReasonDNSFailed              Reason = "DNSFailed"
	ReasonTLSError               Reason = "TLSError"
	ReasonCredentialsUnavailable Reason = "CredentialsUnavailable"
	ReasonUnauthorized           Reason = "Unauthorized"
	ReasonForbidden              Reason = "Forbidden"
	ReasonNotFound               Reason = "NotFound"
	ReasonInvalidRequest         Reason = "InvalidRequest"
	ReasonRateLimited            Reason = "RateLimited"
	ReasonServerError            Reason = "ServerError"
	ReasonBadResponse            Reason = "BadResponse"
	ReasonUnknown                Reason = "Unknown"
)

// Ready reports whether the provider can host proxies when the verdict is r.
func (r Reason) Ready() bool { return r == ReasonReady }

// ReasonDef is one reason of a kind's set. Up tells whether the reason
// means the provider's API answered at its own protocol level (docs/metrics.md:
// "Metrics", "Reasons"): an HTTP status from the API, a reply of the
// host's management daemon. It is the value of provider_health_up.
type ReasonDef struct {
	Reason Reason
	Up     bool
}

// ReasonSet is a kind's closed reason set, in the order the kind documents
// it. It is the only place a reason's up flag is decided.
type ReasonSet []ReasonDef

// Up reports whether the provider's API answered when the verdict is r; a
// reason outside the set is not up.
func (s ReasonSet) Up(r Reason) bool {
	for _, d := range s {
		if d.Reason == r {
			return d.Up
		}
	}
	return false
}

// Without is the set less the given reasons, in the same order: the set of
// an entry that does not opt in to the checks that give them.
func (s ReasonSet) Without(rs ...Reason) ReasonSet {
	out := make(ReasonSet, 0, len(s))
	for _, d := range s {
		if !slices.Contains(rs, d.Reason) {
			out = append(out, d)
		}
	}
	return out
}

// Contains reports whether r is in the set.
func (s ReasonSet) Contains(r Reason) bool {
	for _, d := range s {
		if d.Reason == r {
			return true
		}
	}
	return false
}

// Reasons lists the reasons of the set in its order.
func (s ReasonSet) Reasons() []Reason {
	out := make([]Reason, len(s))
	for i, d := range s {
		out[i] = d.Reason
	}
	return out
}

// Validate checks the contract between a set and the engine: the engine
// makes up Timeout (a check that outlived its deadline) and Unknown (a
// panic, a reason outside the set), and Ready is what ready means, so every
// set has these three, Ready up and the other two not; a reason appears
// once and is a CamelCase word (a capital, then letters and digits),
// since it becomes a label value.
func (s ReasonSet) Validate() error {
	seen := make(map[Reason]bool, len(s))
	var errs []error
	for _, d := range s {
		if d.Reason == "" || d.Reason[0] < 'A' || d.Reason[0] > 'Z' || strings.ContainsFunc(string(d.Reason), func(c rune) bool {
			return (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9')
		}) {
			errs = append(errs, fmt.Errorf("reason %q is not a CamelCase word", d.Reason))
		}
		if seen[d.Reason] {
			errs = append(errs, fmt.Errorf("reason %q is in the set twice", d.Reason))
		}
		seen[d.Reason] = true
	}
	for _, must := range []ReasonDef{{ReasonReady, true}, {ReasonTimeout, false}, {ReasonUnknown, false}} {
		switch {
		case !seen[must.Reason]:
			errs = append(errs, fmt.Errorf("reason set lacks %s, which every kind can give (start the set from EngineReasons() and end it with UnknownReason())", must.Reason))
		case s.Up(must.Reason) != must.Up:
			errs = append(errs, fmt.Errorf("reason %s must have up=%v", must.Reason, must.Up))
		}
	}
	return errors.Join(errs...)
}

// EngineReasons is the start of every kind's set: Ready, what ready means,
// and Timeout, which the engine itself gives a target whose check outlived
// its deadline or was abandoned, or whose caller's budget ran out. With
// UnknownReason, which ends every set and which the engine gives a checker
// that panicked or returned a reason outside its set, they are the reasons
// every kind can give, and the only ones NewKind demands
// (docs/development.md: "Adding a provider"). A kind adds the parts it can
// produce: NetworkReasons if its checker connects to a host, HTTPReasons
// (which has both) behind an HTTP API, and its own.
func EngineReasons() ReasonSet {
	return ReasonSet{{ReasonReady, true}, {ReasonTimeout, false}}
}

// NetworkReasons are the reasons of a checker that connects to a host by
// name or address: Unreachable (refused, reset, dropped before an answer)
// and DNSFailed (the name did not resolve). A kind takes them after
// EngineReasons when its checker dials (kvm's SSH); HTTPReasons has them,
// and the TransportErrors classifier gives them. A kind that dials nothing (a
// local socket, a file) leaves them out, so that its documents list no
// reason it cannot give.
func NetworkReasons() ReasonSet {
	return ReasonSet{{ReasonUnreachable, false}, {ReasonDNSFailed, false}}
}

// UnknownReason ends every kind's set.
func UnknownReason() ReasonDef { return ReasonDef{ReasonUnknown, false} }
