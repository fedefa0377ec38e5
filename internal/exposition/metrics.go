package exposition

import "time"

const namespace = "provider_health"

// Check modes, the mode label of provider_health_exporter_checks_total.
const (
	ModeLive   = "live"   // the check ran for this caller
	ModeShared = "shared" // joined a check another caller had started
	ModeCached = "cached" // reused a verdict younger than min_interval
	// ModeBackoff served the last verdict of a target the checker holds
	// back after repeated failures (provider.Backoffer).
	ModeBackoff = "backoff"
)

// Modes lists the check modes in a stable order.
var Modes = []string{ModeLive, ModeShared, ModeCached, ModeBackoff}

// The help of the framework's families, written by the Exposition (and by
// its test oracle, the engine's ResultCollector).
const (
	UpHelp             = "1 when the provider's API answered at its own protocol level."
	ReadyHelp          = "1 when the provider can host proxies now."
	CapacityHelp       = "How many more proxies fit now: the least over the entry's headroom constraints of floor(headroom / one proxy's need); absent without one."
	DomainCapacityHelp = "How many more proxies fit in the failure domain alone (a zone, node pool, region or rack); only for entries with domains."
	DomainProxiesHelp  = "Proxies running in the failure domain now."
	AfterLossHelp      = "How many more proxies fit once the failure domain is lost and its proxies are created again elsewhere; negative is the proxies left without a place."
	ReasonHelp         = "Why the target is or is not ready: its current reason, always 1; the other reasons of the provider's set are not exported."
	DurationHelp       = "Wall time of the check that produced the verdict."
	TimeoutHelp        = "The budget this scrape gave the check."
	LastCheckHelp      = "When the verdict was produced (older than the scrape when reused within min_interval)."
	LastTransitionHelp = "When ready last changed; the first verdict counts."
	TargetInfoHelp     = "Where the target is."
	AbandonedHelp      = "Checks still running at their deadline plus the grace, left to end with their context; the target got Timeout."
	ChecksHelp         = "Checks by mode: live (ran), shared (joined an in-flight check), cached (reused within min_interval), backoff (last verdict of a target whose recent dials failed, not redialed yet)."
)

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}
