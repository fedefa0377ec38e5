package kvm

import (
	"context"
	"fmt"
	"sync"

	"github.com/digitalocean/go-libvirt"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// A pool's volumes' capacities (virtual sizes), which disk_allocation_ratio
// sums, are kept between checks on the connection, by each volume's key
// (docs/configuration.md: "Promised resources (KVM)"): libvirt has no call
// that returns them together, and one StorageVolGetInfo per volume per
// check costs a pool of libvirt's maximum list of 16,384 volumes that many
// round trips, seconds of CPU and wall time, every check. A steady check
// lists the volumes (StoragePoolListAllVolumes), asks the size of those it
// has not seen, and refreshes one more: the one it read longest ago, so
// every size is read again within as many checks as the pool has volumes
// (a volume is resized rarely; sizes change by resize only). A new
// connection starts with none and reads them all.

// volumeSize is a volume's kept capacity.
type volumeSize struct {
	capacity uint64
	// read is the check that read it last, listed the last whose list
	// had it.
	read, listed uint64
}

// volumeSizes are the kept capacities of one pool's volumes on one
// connection: at most storageVolListMax, the most one list reply has, as
// what a check's list lacks is dropped (docs/scaling.md: "Memory").
type volumeSizes struct {
	mu sync.Mutex
	// pool is the pool the sizes are of: a check of another pool, or of
	// the pool defined again under a new UUID, starts afresh.
	pool  libvirt.StoragePool
	sizes map[string]*volumeSize
	// checks counts the checks of the pool: the stamps of read and listed.
	checks uint64
	// listed holds a check's kept sizes in its list's order, reused
	// from check to check.
	listed []*volumeSize
}

// volumePlan is what one check must ask of a pool's listed volumes.
type volumePlan struct {
	check uint64
	// ask are the volumes whose capacity is not kept, then the one to
	// refresh; known sums the kept capacities of the others, count
	// counts them.
	ask   []libvirt.StorageVol
	known uint64
	count int
}

// plan is what a check of pool, whose list is vols, asks: every volume
// whose capacity is not kept, and the kept one read longest ago (the first
// listed of those read in the same check). It drops the kept capacities of
// volumes not listed: deleted since.
func (k *volumeSizes) plan(pool libvirt.StoragePool, vols []libvirt.StorageVol) volumePlan {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.sizes == nil || k.pool != pool {
		k.pool, k.sizes = pool, make(map[string]*volumeSize, len(vols))
	}
	k.checks++
	p := volumePlan{check: k.checks}
	k.listed = k.listed[:0]
	var oldest *volumeSize
	var refresh libvirt.StorageVol
	for _, v := range vols {
		e := k.sizes[v.Key]
		if e == nil || v.Key == "" {
			p.ask = append(p.ask, v)
			continue
		}
		e.listed = p.check
		k.listed = append(k.listed, e)
		if oldest == nil || e.read < oldest.read {
			oldest, refresh = e, v
		}
	}
	for key, e := range k.sizes {
		if e.listed != p.check {
			delete(k.sizes, key)
		}
	}
	skipped := false
	for _, e := range k.listed {
		if e == oldest && !skipped {
			skipped = true // asked again below
			continue
		}
		p.known = addSat(p.known, e.capacity)
		p.count++
	}
	clear(k.listed) // no pointers kept past the check
	if oldest != nil {
		p.ask = append(p.ask, refresh)
	}
	return p
}

// keep keeps the capacity of vol, read by check; none past
// storageVolListMax.
func (k *volumeSizes) keep(pool libvirt.StoragePool, check uint64, vol libvirt.StorageVol, capacity uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.pool != pool || vol.Key == "" {
		return
	}
	if e := k.sizes[vol.Key]; e != nil {
		e.capacity, e.read = capacity, check
		return
	}
	if len(k.sizes) < storageVolListMax {
		k.sizes[vol.Key] = &volumeSize{capacity: capacity, read: check, listed: check}
	}
}

// forget drops the capacity of a volume libvirt no longer has.
func (k *volumeSizes) forget(pool libvirt.StoragePool, vol libvirt.StorageVol) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.pool == pool {
		delete(k.sizes, vol.Key)
	}
}

// readVolumes sums the capacities of pool's volumes, on lv: the list, then
// the sizes plan says to ask, kept for the next check. A volume deleted
// between the list and its info counts as nothing. When ctx ends before the
// sizes are all read, it returns an error and no sum (the check is a
// Timeout, never a partial sum), and the next check on the connection goes
// on from the sizes read.
func readVolumes(ctx context.Context, lv libvirtClient, k *volumeSizes, poolName string, pool libvirt.StoragePool) (sum uint64, count int, err error) {
	vols, err := lv.StoragePoolListAllVolumes(pool)
	if err != nil {
		return 0, 0, fmt.Errorf("list the volumes of pool %q: %w", poolName, err)
	}
	p := k.plan(pool, vols)
	sum, count = p.known, p.count
	for i, v := range p.ask {
		if provider.Ended(ctx) {
			return 0, 0, fmt.Errorf("%d of the %d volumes' sizes of pool %q not read yet (the next check goes on from there): %w",
				len(p.ask)-i, len(vols), poolName, endedCause(ctx))
		}
		n, err := lv.StorageVolGetInfo(v)
		if libvirtCode(err, libvirt.ErrNoStorageVol) {
			k.forget(pool, v) // deleted since the list: it promises nothing
			continue
		}
		if err != nil {
			return 0, 0, fmt.Errorf("get info of volume %q in pool %q: %w", v.Name, poolName, err)
		}
		k.keep(pool, p.check, v, n)
		sum = addSat(sum, n)
		count++
	}
	return sum, count, nil
}
