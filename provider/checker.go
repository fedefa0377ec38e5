package provider

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Target is one thing a provider checks: the API server of a cluster, the
// API of a cloud project, one host.
type Target struct {
	Name    string // the target label
	Address string // where it is, for target_info and the status page, redacted (internal/redact) by the engine
}

// Checker checks the targets of one configured provider entry.
//
// Check must return when ctx ends: the framework reports Timeout for a check
// that does not, and abandons it at its deadline plus AbandonGrace; the
// target's next scrape then starts a fresh check while the abandoned one
// may still run (at most MaxAbandoned of them). It must not panic; a panic
// is recovered and reported as Unknown. Check is called concurrently for
// different targets; for one target of one checker, twice at once only
// when an earlier check was abandoned.
type Checker interface {
	// Targets lists the targets in configuration order. It does no I/O.
	// The engine calls it once, when the entry is loaded: a scrape, the
	// status page and a reload never call into a checker but to check.
	Targets() []Target
	// Check checks one target (a name from Targets) and returns its verdict.
	// The logger carries the provider, name and target; messages logged to
	// it at debug level are what /probe?debug=true shows.
	Check(ctx context.Context, logger *slog.Logger, target string) Verdict
}

// Closer is implemented by checkers that hold resources (kept connections)
// that must be released when a reload replaces or removes them.
type Closer interface {
	Close() error
}

// Adopter is implemented by checkers that can take over state from the
// checker of the same provider and name that they replace on reload, so that
// the kept connections of unchanged targets survive it. Adopt is called before
// the old checker is closed; whatever it takes over, the old checker must no
// longer close.
type Adopter interface {
	Adopt(old Checker)
}

// Backoffer is implemented by checkers that hold back the live checks of a
// target whose recent checks failed at a cost to the other targets (a
// failing connection attempt holds one of the few connection slots). Until NotBefore, the engine
// serves the target's last verdict (mode="backoff") instead of checking;
// a target that has no verdict yet is checked. NotBefore does no I/O.
type Backoffer interface {
	NotBefore(target string) time.Time
}

// Verdict is what one check says about one target.
type Verdict struct {
	Reason Reason
	// Message is free text for logs, the status page and debug output; it
	// never becomes a label and must not contain secrets.
	Message string
	// Address, when not empty, is where the check found the target, for
	// a target whose address is not in the configuration but in a file
	// the check reads (a kubeconfig's server). The engine shows it from
	// then on instead of the address Targets gave at load.
	Address string
	// Facts are what only the provider knows of the target; nil when it
	// has nothing to add to the shared metrics.
	Facts Facts
	// Capacity is how many more proxies fit and which constraint binds
	// it (capacity.go: Capacity says how a provider sets it); the zero
	// value, unknown, exports no capacity series.
	Capacity Capacity
	// Domains are the capacity per failure domain (domain.go), in the
	// order the provider found them; nil when the entry asks for none.
	Domains []Domain
}

// Facts are a provider's own facts about one target. The provider declares
// and emits its own metric families from them, as node_exporter's
// collectors own their descriptors; the framework names no provider.
//
// The Facts of a verdict must not change once Check returned them: the
// framework collects a verdict's metrics once and serves them again for as
// long as it serves the verdict (min_interval, backoff). A check that
// found the same facts as the one before may return the same pointer
// again: its metrics are then not collected again either, which at a
// thousand steady targets is most of what a scrape would collect. Facts a
// FactKeeper returns are collected every time.
type Facts interface {
	// Collect sends the provider's own metrics of the target; name is the
	// configured entry's name.
	Collect(ch chan<- prometheus.Metric, name, target string)
	// Details are the facts shown under "details" in /api/v1/status.
	Details() map[string]string
}

// FactKeeper is implemented by checkers that keep facts across checks (a
// user name, a server version, a connect counter), so that a
// verdict the framework had to make up (a check that never answered, a
// panic, a target not checked yet) still carries them instead of resetting
// a counter or dropping the user. Facts does no I/O; nil means none.
type FactKeeper interface {
	Facts(target string) Facts
}

// Ended reports whether the check's context is over: the one test every
// provider uses before it classifies an error, because when the budget is
// spent the verdict is Timeout whatever the error says (docs/configuration.md: "Timeouts").
// The deadline counts even before its timer fires: I/O that took its
// deadline from ctx can fail a moment before ctx.Err is set.
func Ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// A check that has not returned by its deadline plus AbandonGrace is
// abandoned (docs/configuration.md: "Timeouts"): the engine stops waiting for it, the
// target's next scrape starts a fresh check, and the abandoned one is left
// to end with its context. At most MaxAbandoned abandoned checks of one
// target may still be running; while that many are, the target reports
// Timeout instead of starting another, so a callee that never returns
// cannot pile up goroutines.
const (
	AbandonGrace = 2 * time.Second
	MaxAbandoned = 2
)

// CloseBound is how long closing the checkers that a reload replaced, or
// all of them at shutdown, may take (docs/configuration.md: "Timeouts"). A checker whose
// Close has not returned by then (a connection attempt stuck in a callee that ignores
// its context) is left to finish on its own, so that neither a reload nor
// SIGTERM waits on it.
const CloseBound = 3 * time.Second
