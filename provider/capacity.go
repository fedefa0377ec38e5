package provider

import (
	"fmt"
	"math"
	"math/big"
)

// Capacity is how many more proxies fit on a target now
// (docs/metrics.md: "Capacity"), exported as provider_health_capacity and
// shown with its binding constraint in /api/v1/status and on the status
// page.
//
// Every headroom key of a configuration entry names what ONE proxy needs
// (a min_quota_headroom entry, min_pool_available, min_free_memory), so a
// constraint allows floor(headroom / need) more proxies, and a target's
// capacity is the least over its constraints. A provider computes each
// constraint with Constraint (or ConstraintFloat, ConstraintUint64,
// ConstraintRat, whichever holds its numbers exactly), combines them with
// Min and sets the result on its Verdict:
//
//	c := provider.ConstraintUint64(poolAvailable, minPoolAvailable, "pool "+pool)
//	c = c.Min(provider.ConstraintUint64(freeMemory, minFreeMemory, "memory"))
//	v := provider.Verdict{Reason: provider.ReasonReady, Capacity: c}
//
// A capacity made of other bounds combines the same way: a node fit
// counted over the cluster's nodes is Known with Binding "nodes", and
// quota.Min(nodes) is the entry's capacity, the quota's binding kept when
// it is the lesser (a tie keeps the receiver's).
//
// The zero Capacity is unknown: an entry with no capacity key, or a check
// that ended before it could measure one, has no capacity series.
//
// The verdict must agree with it: ready ⇔ capacity ≥ 1 wherever a capacity
// is known. The Constraint functions give 0 exactly when headroom < need,
// the comparison the headroom reasons make, so a provider that decides its
// reason from the same numbers agrees at every boundary. The engine holds
// the rest: a verdict that is not Ready reports at most 0 (binding
// its reason when the constraints alone would allow more: nothing fits
// while, say, the base image is missing), a Timeout or Unknown no capacity
// at all, and a Ready verdict with a capacity below 1 — a provider bug —
// loses the capacity, with an error in the log.
type Capacity struct {
	// Known is false when no constraint applies: no series is exported.
	Known bool
	// Proxies is how many more proxies fit: 0 ≤ Proxies ≤ MaxCapacity.
	Proxies int64
	// Binding names the constraint that gives the least, in a few words a
	// user recognises from the configuration or the provider: "region
	// us-central1 CPUS", "pool default", "memory", "quota compute
	// requests.cpu", "nodes". It is shown, never a label.
	Binding string
}

// MaxCapacity is the most proxies a capacity counts: the largest integer
// a float64 gauge holds exactly. Quantities far beyond any real fleet (a
// quota of 10^18 bytes divided by a need of one) stop there instead of
// overflowing.
const MaxCapacity = 1 << 53

// Constraint is the capacity of one constraint from whole numbers:
// floor(headroom / need), 0 when headroom < need (a negative headroom included), bounded
// to MaxCapacity. A need of 0 or less asks only that headroom ≥ need: it
// gives 0 when headroom is short of it and no bound (unknown) otherwise.
func Constraint(headroom, need int64, binding string) Capacity {
	if headroom < need {
		return Capacity{Known: true, Binding: binding}
	}
	if need <= 0 {
		return Capacity{}
	}
	return Capacity{Known: true, Proxies: min(headroom/need, MaxCapacity), Binding: binding}
}

// ConstraintUint64 is Constraint for unsigned quantities (bytes of a pool
// or of memory).
func ConstraintUint64(headroom, need uint64, binding string) Capacity {
	if need == 0 {
		return Capacity{}
	}
	return Capacity{Known: true, Proxies: int64(min(headroom/need, MaxCapacity)), Binding: binding}
}

// ConstraintFloat is Constraint for measured floats (a cloud quota's
// limit − usage). It
// gives 0 exactly when headroom < need, whatever the rounding of the
// quotient, and 0 for a NaN headroom; an infinite headroom is MaxCapacity.
// A NaN or infinite need is unknown.
func ConstraintFloat(headroom, need float64, binding string) Capacity {
	if math.IsNaN(need) || math.IsInf(need, 0) {
		return Capacity{}
	}
	if !(headroom >= need) { // NaN included
		return Capacity{Known: true, Binding: binding}
	}
	if need <= 0 {
		return Capacity{}
	}
	// headroom ≥ need > 0, so the rounded quotient is at least 1.
	q := math.Floor(headroom / need)
	if q >= MaxCapacity {
		return Capacity{Known: true, Proxies: MaxCapacity, Binding: binding}
	}
	return Capacity{Known: true, Proxies: max(int64(q), 1), Binding: binding}
}

// ConstraintRat is Constraint for exact rationals of any size (Kubernetes
// quantities).
func ConstraintRat(headroom, need *big.Rat, binding string) Capacity {
	if need == nil || headroom == nil {
		return Capacity{}
	}
	if headroom.Cmp(need) < 0 {
		return Capacity{Known: true, Binding: binding}
	}
	if need.Sign() <= 0 {
		return Capacity{}
	}
	q := new(big.Rat).Quo(headroom, need)
	n := new(big.Int).Quo(q.Num(), q.Denom()) // both positive: floor
	if !n.IsInt64() || n.Int64() > MaxCapacity {
		return Capacity{Known: true, Proxies: MaxCapacity, Binding: binding}
	}
	return Capacity{Known: true, Proxies: n.Int64(), Binding: binding}
}

// Min is the lesser of two capacities; an unknown one does not count. On a
// tie c is kept, so the constraint checked first names the binding.
func (c Capacity) Min(o Capacity) Capacity {
	switch {
	case !o.Known:
		return c
	case !c.Known || o.Proxies < c.Proxies:
		return o
	}
	return c
}

// Blocked is c for a verdict whose reason is r: c when r is Ready or c
// is 0 or unknown, else 0 bound by r, since no proxy fits while r holds
// (a missing base image, a refused dry run) however much room the
// constraints leave.
func (c Capacity) Blocked(r Reason) Capacity {
	if !c.Known || r.Ready() || c.Proxies <= 0 {
		return c
	}
	return Capacity{Known: true, Binding: string(r)}
}

// Contradicts reports whether c contradicts a verdict whose reason is r:
// a known capacity is at least 1 exactly when r is Ready. The tests of
// every kind check each verdict they make with it; the engine mends what
// it finds (Capacity).
func (c Capacity) Contradicts(r Reason) bool {
	return c.Known && (c.Proxies >= 1) != r.Ready()
}

// String is the capacity as the status page and logs say it.
func (c Capacity) String() string {
	if !c.Known {
		return "unknown"
	}
	if c.Binding == "" {
		return fmt.Sprintf("%d", c.Proxies)
	}
	return fmt.Sprintf("%d (%s)", c.Proxies, c.Binding)
}
