// Package collector is the framework every provider plugs into: the checker
// contract, the closed reason sets, the scrape budget, concurrent fan-out with
// shared in-flight checks and min_interval reuse, and the translation of
// verdicts into metrics and status.
package collector

import (
	"context"
	"log/slog"
	"time"
)

// Target is one thing a provider checks: the API server of a cluster, the
// Compute API of a project, one KVM host.
type Target struct {
	Name    string // the target label
	Address string // where it is, for target_info and the status page
	// KVM holds what the configuration says of a KVM host (User, Pool),
	// so that its host_info keeps the SSH user even for a verdict the
	// framework had to make up; nil for other providers.
	KVM *KVMFacts
}

// Checker checks the targets of one configured provider entry.
//
// Check must return when ctx ends (the framework reports Timeout for a check
// that does not, but its goroutine then leaks until it returns). It must not
// panic; a panic is recovered and reported as Unknown. Check may be called
// concurrently for different targets, and for the same target by a forced
// debug probe.
type Checker interface {
	// Targets lists the targets in configuration order. It does no I/O.
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
// kept KVM connections of unchanged hosts survive it. Adopt is called before
// the old checker is closed; whatever it takes over, the old checker must no
// longer close.
type Adopter interface {
	Adopt(old Checker)
}

// Verdict is what one check says about one target.
type Verdict struct {
	Reason Reason
	// Message is free text for logs, the status page and debug output; it
	// never becomes a label and must not contain secrets.
	Message string
	// Details are provider-specific facts for /api/v1/status (kvm: user,
	// pool, poolState, libvirtVersion).
	Details map[string]string
	// KVM carries the facts the kvm metrics are made of; nil for other
	// providers.
	KVM *KVMFacts
}

// KVMFacts are the per-host facts behind the kvm metrics of SPEC §6.
type KVMFacts struct {
	User           string
	LibvirtVersion string // "9.0.0" once known, else empty
	Pool           string
	// PoolState is virsh's word for the pool state (inactive, building,
	// running, degraded, inaccessible); empty when the pool is unknown, and
	// then no pool metrics are exported.
	PoolState       string
	CapacityBytes   uint64
	AllocationBytes uint64
	AvailableBytes  uint64
	// Connects is the number of SSH+libvirt sessions established to the
	// host since the exporter started (a counter).
	Connects uint64
}

// Result is a verdict with the facts of the check that produced it.
type Result struct {
	Verdict
	Target    Target
	CheckedAt time.Time     // when the verdict was produced
	Duration  time.Duration // wall time of the check
}

// KVMPoolStates are the pool states in virsh's words, in libvirt's numbering
// (VIR_STORAGE_POOL_INACTIVE = 0 ...).
var KVMPoolStates = []string{"inactive", "building", "running", "degraded", "inaccessible"}
