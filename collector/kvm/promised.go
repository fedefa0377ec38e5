package kvm

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/bits"
	"strconv"
	"strings"

	"github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// ReasonHostCPULow is the reason of a host whose defined domains hold so
// many vCPUs that fewer than min_free_vcpus are left at
// cpu_allocation_ratio (docs/metrics.md: "Reasons").
const ReasonHostCPULow provider.Reason = "HostCPULow"

// What is promised on a host is counted as OpenStack Nova's placement
// counts it (docs/configuration.md: "Promised resources (KVM)"): per resource,
// (total − reserved) × allocation ratio is what may be promised, every
// defined domain holds what it was defined with whether it runs or not,
// and a proxy fits while what is left covers its need. It is what a host
// has promised, not what its guests use now: a shut-off domain uses no
// memory and will when it starts.

// counts tells whether p counts any promised resource.
func (p Promised) counts() bool { return p.VCPUs > 0 || p.MemoryRatio > 0 || p.DiskRatio > 0 }

// domains tells whether p needs the host's cores and memory and its
// domains' definitions.
func (p Promised) domains() bool { return p.VCPUs > 0 || p.MemoryRatio > 0 }

// promisedReading is what a check read of a host's promised resources;
// each part is known only where a key asks for it and its calls answered.
type promisedReading struct {
	node      nodeInfo
	nodeKnown bool
	// domainVCPUs and domainMemory (bytes) are summed over every defined
	// domain, domains counts them.
	domainVCPUs, domainMemory uint64
	domains                   int
	domainsKnown              bool
	// proxies counts the domains proxy_vm_name matches, known with
	// domainsKnown.
	proxies int64
	// volumes is the sum of the pool's volumes' capacities (virtual
	// sizes), volumeCount counts them.
	volumes      uint64
	volumeCount  int
	volumesKnown bool
}

// readPromised reads what the host's promised-resource keys need, on s:
// the host's cores and memory (NodeGetInfo, once per connection), every
// defined domain's vCPUs and maximum memory in one ConnectGetAllDomainStats
// whatever the number of domains, and the pool's volumes' capacities (one
// StoragePoolListAllVolumes, then StorageVolGetInfo for the volumes whose
// capacity the connection does not keep, and one more: readVolumes).
// Every sum saturates: what a peer reports (a sparse volume's virtual size
// up to 2^63 − 1 bytes, maximum memory in KiB) cannot wrap to room.
// Failures are classified as the pool check's are.
func (c *Checker) readPromised(ctx context.Context, logger *slog.Logger, h *host, s *session, pool libvirt.StoragePool) (promisedReading, provider.Reason, error) {
	p := h.mins.promised()
	lv := loggedClient{next: s.lv, logger: logger}
	var rd promisedReading
	var missing error
	err := s.call(ctx, func() error {
		if p.domains() {
			n, ok := s.nodeInfo()
			if !ok {
				var err error
				if n, err = lv.NodeGetInfo(); err != nil {
					return fmt.Errorf("get node info: %w", err)
				}
				s.keepNodeInfo(n)
			}
			rd.node, rd.nodeKnown = n, true
			doms, err := lv.ConnectGetAllDomainStats()
			if err != nil {
				return fmt.Errorf("get the domains' vCPUs and memory: %w", err)
			}
			for _, d := range doms {
				if h.proxyVMName != "" && proxyName(h.proxyVMName, d.name) {
					rd.proxies++
				}
				if p.VCPUs > 0 && !d.hasVCPUs || p.MemoryRatio > 0 && !d.hasMemory {
					missing = fmt.Errorf("libvirtd reported no %s and %s of domain %q: its driver does not report what a domain is defined with",
						statVCPUMaximum, statBalloonMaximum, d.name)
					return nil
				}
				rd.domainVCPUs = addSat(rd.domainVCPUs, d.vcpus)
				rd.domainMemory = addSat(rd.domainMemory, kibToBytes(d.memoryKiB))
			}
			rd.domains, rd.domainsKnown = len(doms), true
		}
		if p.DiskRatio > 0 {
			var err error
			if rd.volumes, rd.volumeCount, err = readVolumes(ctx, lv, &s.volumes, h.pool, pool); err != nil {
				return err
			}
			rd.volumesKnown = true
		}
		return nil
	})
	switch {
	case err == nil && missing != nil:
		return rd, provider.ReasonUnknown, missing
	case err == nil:
		return rd, provider.ReasonReady, nil
	case !provider.Ended(ctx) && libvirtCode(err, libvirt.ErrNoStoragePool):
		s.forgetPool()
		return rd, ReasonPoolMissing, err
	}
	reason, err := h.callFailed(ctx, logger, s, err)
	return rd, reason, err
}

// addSat is a + b, or the largest uint64 where that overflows: a sum of
// what a peer reports that wrapped would read as room.
func addSat(a, b uint64) uint64 {
	sum, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return math.MaxUint64
	}
	return sum
}

// kibToBytes is kib × 1024, or the largest uint64 where that overflows.
func kibToBytes(kib uint64) uint64 {
	if kib > math.MaxUint64>>10 {
		return math.MaxUint64
	}
	return kib << 10
}

// allocatable is floor((total − reserved) × ratio), what may be promised of
// a resource, as Nova's placement computes a provider's capacity; 0 when
// reserved is all of it.
func allocatable(total, reserved uint64, ratio float64) int64 {
	if reserved >= total {
		return 0
	}
	return int64(min(math.Floor(float64(total-reserved)*ratio), float64(math.MaxInt64/2)))
}

// promisedConstraint is one promised resource's constraint: how many proxies the
// room left fits, with the words the status shows for it.
type promisedConstraint struct {
	cap     provider.Capacity
	binding string
}

// short tells whether the constraint leaves no room for one proxy: the
// comparison its reason makes, so that ready ⇔ capacity ≥ 1.
func (f promisedConstraint) short() bool { return f.cap.Known && f.cap.Proxies < 1 }

// vcpuConstraint: floor((cores × ratio − vCPUs of the defined domains) /
// min_free_vcpus).
func vcpuConstraint(p Promised, rd *promisedReading) promisedConstraint {
	if p.VCPUs == 0 || !rd.nodeKnown || !rd.domainsKnown {
		return promisedConstraint{}
	}
	alloc := allocatable(rd.node.cpus, 0, p.CPURatio)
	b := fmt.Sprintf("vCPUs: %d of %d at ratio %s", rd.domainVCPUs, alloc, formatRatio(p.CPURatio))
	return promisedConstraint{provider.Constraint(alloc-int64(min(rd.domainVCPUs, math.MaxInt64/2)), int64(p.VCPUs), b), b}
}

// memoryConstraint: floor(((memory − reserved_memory) × ratio − maximum memory of
// the defined domains) / min_free_memory).
func memoryConstraint(m Minimums, rd *promisedReading) promisedConstraint {
	p := m.promised()
	if p.MemoryRatio == 0 || m.FreeMemory == 0 || !rd.nodeKnown || !rd.domainsKnown {
		return promisedConstraint{}
	}
	alloc := allocatable(kibToBytes(rd.node.memoryKiB), p.ReservedMemory, p.MemoryRatio)
	b := "memory promised: " + promisedOf(rd.domainMemory, alloc, p.MemoryRatio)
	return promisedConstraint{provider.Constraint(alloc-int64(min(rd.domainMemory, math.MaxInt64/2)), int64(min(m.FreeMemory, math.MaxInt64/2)), b), b}
}

// diskConstraint: floor((pool capacity × ratio − the volumes' capacities) /
// min_pool_available).
func diskConstraint(m Minimums, pool string, capacity uint64, rd *promisedReading) promisedConstraint {
	p := m.promised()
	if p.DiskRatio == 0 || m.PoolAvailable == 0 || !rd.volumesKnown {
		return promisedConstraint{}
	}
	alloc := allocatable(capacity, 0, p.DiskRatio)
	b := "pool " + pool + " promised: " + promisedOf(rd.volumes, alloc, p.DiskRatio)
	return promisedConstraint{provider.Constraint(alloc-int64(min(rd.volumes, math.MaxInt64/2)), int64(min(m.PoolAvailable, math.MaxInt64/2)), b), b}
}

// promisedOf says "28 of 31.5 GiB": the unit once when both read in the
// same one, and the ratio when it is not 1.
func promisedOf(promised uint64, alloc int64, ratio float64) string {
	p, a := formatBytes(promised), formatBytes(uint64(max(alloc, 0)))
	if i, j := strings.LastIndexByte(p, ' '), strings.LastIndexByte(a, ' '); p[i:] == a[j:] {
		p = p[:i]
	}
	s := p + " of " + a
	if ratio != 1 {
		s += " at ratio " + formatRatio(ratio)
	}
	return s
}

// formatRatio writes a ratio as the configuration would: "4", "1.5".
func formatRatio(r float64) string { return strconv.FormatFloat(r, 'g', -1, 64) }

// shortMessage is the message of a promised resource's reason: what is
// promised of what may be, and one proxy's need.
func shortMessage(f promisedConstraint, need string) string {
	return f.binding + "; one proxy needs " + need
}
