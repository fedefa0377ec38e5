package kvm

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// The headroom reasons of a KVM host (docs/metrics.md: "Reasons"): libvirtd answered,
// so up = 1, but a proxy's volume or memory would not fit.
const (
	// ReasonPoolFull: the pool's available bytes are below min_pool_available.
	ReasonPoolFull provider.Reason = "PoolFull"
	// ReasonHostMemoryLow: the host's free memory is below min_free_memory.
	ReasonHostMemoryLow provider.Reason = "HostMemoryLow"
)

// Minimums are a host's headroom requirements in bytes; 0 means not set.
type Minimums struct {
	// PoolAvailable is min_pool_available: compared with the available
	// bytes the pool-info call already read, so it costs no RPC.
	PoolAvailable uint64
	// FreeMemory is min_free_memory: only when it is set does a check make
	// the NodeGetFreeMemory call.
	FreeMemory uint64
	// Promised is the host's promised-resource policy: only a host that
	// counts a resource makes the calls that read it (readPromised); nil
	// where none is counted.
	Promised *Promised
}

// promised is the host's promised-resource policy, the zero one (nothing
// counted) where it has none.
func (m Minimums) promised() Promised {
	if m.Promised == nil {
		return Promised{}
	}
	return *m.Promised
}

// headroomVerdict turns a check's readings into its verdict when the pool
// check itself passed. The precedence is docs/configuration.md's ("KVM"): a pool-state reason
// (PoolInactive, ...) wins over PoolFull, which wins over HostMemoryLow, so
// the most basic thing to fix is named first. poolReason is checkPool's
// reason, available the pool's available bytes it read, freeMemory the
// NodeGetFreeMemory reading (ignored unless mins.FreeMemory is set). An empty
// message means the pool verdict's own message stands.
func headroomVerdict(poolReason provider.Reason, pool string, available uint64, mins Minimums, freeMemory uint64) (provider.Reason, string) {
	if poolReason != provider.ReasonReady {
		return poolReason, ""
	}
	if mins.PoolAvailable > 0 && available < mins.PoolAvailable {
		have, want := formatBytePair(available, mins.PoolAvailable)
		return ReasonPoolFull, fmt.Sprintf("pool %s: %s available, %s required", pool, have, want)
	}
	if mins.FreeMemory > 0 && freeMemory < mins.FreeMemory {
		have, want := formatBytePair(freeMemory, mins.FreeMemory)
		return ReasonHostMemoryLow, fmt.Sprintf("host free memory: %s, %s required", have, want)
	}
	return provider.ReasonReady, ""
}

// blocksPlacement are the reasons of a host that answered about its pool
// and placement but can take no proxy until someone acts: its capacity is
// 0, bound by the reason.
var blocksPlacement = []provider.Reason{
	ReasonPoolMissing, ReasonPoolInactive, ReasonPoolBuilding, ReasonPoolDegraded, ReasonPoolInaccessible,
	ReasonVolumeMissing, ReasonNetworkMissing, ReasonNetworkInactive,
}

// hostCapacity is how many more proxies a host takes (docs/metrics.md:
// "Capacity"): min(pool available / min_pool_available, free memory /
// min_free_memory, and what is promised of the pool, the memory and the
// vCPUs leaves: promisedConstraint) over the keys that are set, unknown when neither is
// or when the check measured nothing (libvirtd did not answer about the
// pool). The same comparisons decide PoolFull and HostMemoryLow
// (headroomVerdict): a constraint counts 0 exactly when its reading is
// below its minimum, so ready ⇔ capacity ≥ 1.
func hostCapacity(r *result, mins Minimums) provider.Capacity {
	if mins == (Minimums{}) {
		return provider.Capacity{}
	}
	switch {
	case slices.Contains(blocksPlacement, r.reason):
		return provider.Capacity{Known: true, Binding: string(r.reason)}
	case r.reason != provider.ReasonReady && r.reason != ReasonPoolFull && r.reason != ReasonHostMemoryLow && r.reason != ReasonHostCPULow:
		return provider.Capacity{}
	}
	c := provider.ConstraintUint64(r.info.available, mins.PoolAvailable, "pool "+r.pool)
	if r.freeKnown {
		c = c.Min(provider.ConstraintUint64(r.free, mins.FreeMemory, "memory"))
	}
	// What is promised bounds it too (docs/metrics.md: "Capacity"), each
	// with the comparison its reason makes (promisedConstraint.short).
	c = c.Min(diskConstraint(mins, r.pool, r.info.capacity, &r.promised).cap)
	c = c.Min(memoryConstraint(mins, &r.promised).cap)
	return c.Min(vcpuConstraint(mins.promised(), &r.promised).cap)
}

// checkFreeMemory makes the NodeGetFreeMemory call on s, h's kept connection,
// and classifies a failure as checkPool does: libvirtd answering with an
// error keeps the connection (Unknown), the end of ctx is Timeout, anything
// else is a lost connection, which is dropped so the next check redials.
func (c *Checker) checkFreeMemory(ctx context.Context, logger *slog.Logger, h *host, s *session) (uint64, provider.Reason, error) {
	lv := loggedClient{next: s.lv, logger: logger}
	var free uint64
	err := s.call(ctx, func() error {
		var err error
		free, err = lv.NodeGetFreeMemory()
		if err != nil {
			return fmt.Errorf("get free memory of host: %w", err)
		}
		return nil
	})
	if err == nil {
		return free, provider.ReasonReady, nil
	}
	reason, err := h.callFailed(ctx, logger, s, err)
	return 0, reason, err
}

func (c loggedClient) NodeGetFreeMemory() (uint64, error) {
	start := time.Now()
	v, err := c.next.NodeGetFreeMemory()
	c.log("NodeGetFreeMemory", start, err, slog.Uint64("freeMemory", v))
	return v, err
}

// formatBytes writes n in binary units with at most one decimal: "300 MiB",
// "1.5 GiB", "512 B".
func formatBytes(n uint64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return strconv.FormatUint(n, 10) + " B"
	}
	v, i := float64(n)/1024, 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	return strings.TrimSuffix(s, ".0") + " " + units[i:i+1] + "iB"
}

// formatBytePair formats what was found and what was required; when
// rounding makes them read the same ("20 GiB available, 20 GiB required" for
// one byte short), both get their exact byte counts too.
func formatBytePair(have, want uint64) (string, string) {
	h, w := formatBytes(have), formatBytes(want)
	if h == w && have != want {
		h = fmt.Sprintf("%s (%d bytes)", h, have)
		w = fmt.Sprintf("%s (%d bytes)", w, want)
	}
	return h, w
}
