package engine

import "time"

const namespace = "provider_health"

// The help of the framework's families, written by the Exposition (and by
// its test oracle, ResultCollector).
const (
	upHelp             = "1 when the provider's API answered at its own protocol level."
	readyHelp          = "1 when the provider can host proxies now."
	capacityHelp       = "How many more proxies fit now: the least over the entry's headroom constraints of floor(headroom / one proxy's need); absent without one."
	reasonHelp         = "Why the target is or is not ready: its current reason, always 1; the other reasons of the provider's set are not exported."
	durationHelp       = "Wall time of the check that produced the verdict."
	timeoutHelp        = "The budget this scrape gave the check."
	lastCheckHelp      = "When the verdict was produced (older than the scrape when reused within min_interval)."
	lastTransitionHelp = "When ready last changed; the first verdict counts."
	targetInfoHelp     = "Where the target is."
	abandonedHelp      = "Checks still running at their deadline plus the grace, left to end with their context; the target got Timeout."
	checksHelp         = "Checks by mode: live (ran), shared (joined an in-flight check), cached (reused within min_interval), backoff (last verdict of a target whose recent dials failed, not redialed yet)."
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
