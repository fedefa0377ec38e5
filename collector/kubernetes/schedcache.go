package kubernetes

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	schedcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// clusterCache is kube-scheduler's own cache (pkg/scheduler/backend/cache)
// of one cluster and identity, fed by the events of the shared watches of
// Nodes and Pods (watchSet): the code that keeps the scheduler's NodeInfos
// right, each bound Pod's terms parsed once when its event arrives
// (framework.NewPodInfo, in the cache's AddPod), not at every fit. A fit
// starts from a Snapshot that UpdateSnapshot brings up to date by copying
// only the NodeInfos whose generation moved since that snapshot's last
// fit (docs/scaling.md: "schedule: watch caches and the node fit").
//
// Entries on the cluster share the cache. Each fit holds a snapshot of
// its own while it runs (acquire, release): UpdateSnapshot writes a
// snapshot's NodeInfos in place, so one snapshot read by two fits, or
// refreshed while a fit reads it, would be a data race, and a lock held
// for a fit would make an entry with a 1 s budget wait for one of 15 s.
// Idle snapshots are kept for the next fits (at most maxIdleSnapshots):
// one entry, or eight scraped one after another, refresh one snapshot
// incrementally; eight at once build the others once.
type clusterCache struct {
	cache  schedcache.Cache
	logger klog.Logger

	mu   sync.Mutex
	idle []*schedcache.Snapshot

	// usage is the bound Pods' requests per node as the last fit summed
	// them, by node name, with the generation of the NodeInfo they were
	// summed from (fitSnapshot.usage).
	usageMu sync.Mutex
	usage   map[string]usageAt

	// events counts the watch events applied to the cache: the state a
	// shared fit is keyed by (sharedfit.go).
	events atomic.Uint64
	// nsTerms counts the Pods the cache holds whose required terms select
	// namespaces by label (needsNamespaces).
	nsTerms atomic.Int64
	fitsMu  sync.Mutex
	fits    map[fitKey]*sharedFit
}

// usageAt is one node's summed requests and the NodeInfo generation they
// were summed at; use is nil for a node with no bound Pod.
type usageAt struct {
	gen int64
	use *nodeUse
}

// maxIdleSnapshots bounds the snapshots kept between fits; a snapshot is
// the NodeInfos' structs and their lists of PodInfo pointers, not the
// PodInfos, which the cache owns.
const maxIdleSnapshots = 2

// newClusterCache starts kube-scheduler's cache, its metrics goroutine
// ending with ctx (the watches'), and registers its handlers on the
// watches' informers before they run; regs are the registrations, synced
// once the handlers have seen each informer's initial list.
func newClusterCache(ctx context.Context, nodes, pods cache.SharedIndexInformer) (*clusterCache, []cache.ResourceEventHandlerRegistration, error) {
	initSchedulerMetrics()
	logger := klog.FromContext(ctx).V(10) // the cache's own logs stay quiet
	cc := &clusterCache{cache: schedcache.New(ctx, nil, false, false), logger: logger}
	nreg, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if n, ok := obj.(*corev1.Node); ok {
				cc.cache.AddNode(logger, n)
				cc.events.Add(1)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*corev1.Node)
			n, ok2 := newObj.(*corev1.Node)
			if ok1 && ok2 {
				cc.cache.UpdateNode(logger, o, n)
				cc.events.Add(1)
			}
		},
		DeleteFunc: func(obj any) {
			if n, ok := tombstone(obj).(*corev1.Node); ok {
				_ = cc.cache.RemoveNode(logger, n)
				cc.events.Add(1)
			}
		},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("scheduler cache: %w", err)
	}
	// Errors of the cache's Pod calls are a Pod it does not hold: nothing
	// to add. A Pod without a UID (no API server sends one) is keyed by its
	// name instead (withUID), so that its requests count as the watch's
	// list counts them.
	preg, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if p, ok := obj.(*corev1.Pod); ok && cachedPod(p) {
				_ = cc.cache.AddPod(logger, withUID(p))
				cc.countTerms(p, 1)
				cc.events.Add(1)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*corev1.Pod)
			n, ok2 := newObj.(*corev1.Pod)
			if !ok1 || !ok2 {
				return
			}
			defer cc.events.Add(1)
			switch {
			case cachedPod(o) && cachedPod(n):
				_ = cc.cache.UpdatePod(logger, withUID(o), withUID(n))
				cc.countTerms(o, -1)
				cc.countTerms(n, 1)
			case cachedPod(n):
				_ = cc.cache.AddPod(logger, withUID(n))
				cc.countTerms(n, 1)
			case cachedPod(o):
				_ = cc.cache.RemovePod(logger, withUID(o))
				cc.countTerms(o, -1)
			}
		},
		DeleteFunc: func(obj any) {
			if p, ok := tombstone(obj).(*corev1.Pod); ok && cachedPod(p) {
				_ = cc.cache.RemovePod(logger, withUID(p))
				cc.countTerms(p, -1)
				cc.events.Add(1)
			}
		},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("scheduler cache: %w", err)
	}
	return cc, []cache.ResourceEventHandlerRegistration{nreg, preg}, nil
}

// cachedPod says whether the scheduler's cache holds p: bound and not
// terminal, as kube-scheduler's own handlers decide (the watch's field
// selector sends no other; a server that ignores it may).
func cachedPod(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// countTerms adds n to the count of held Pods whose terms select
// namespaces, when p's do.
func (cc *clusterCache) countTerms(p *corev1.Pod, n int64) {
	if termsSelectNamespaces(p) {
		cc.nsTerms.Add(n)
	}
}

// withUID is p, or a copy of it keyed by namespace and name when it has
// no UID: the scheduler's cache keys Pods by UID and refuses one without.
func withUID(p *corev1.Pod) *corev1.Pod {
	if p.UID != "" {
		return p
	}
	c := *p
	c.UID = ktypes.UID("no-uid/" + p.Namespace + "/" + p.Name)
	return &c
}

func tombstone(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

// fitSnapshot is one fit's snapshot of the cluster cache: the fit may
// add copies of its Pod to the NodeInfos it holds, saving each before its
// first change (save), and release puts them back as they were.
type fitSnapshot struct {
	cc   *clusterCache
	snap *schedcache.Snapshot
	// gens are the NodeInfos' generations when acquired, in List's order:
	// one that moved and was not saved is a change release cannot undo.
	gens  []int64
	saved map[*framework.NodeInfo]*framework.NodeInfo
	// nominated are the Pods nominated to nodes that the fit adds to
	// their NodeInfos before it counts (nominated.go); set by the caller.
	nominated []*corev1.Pod
}

// acquire is an up-to-date snapshot for one fit, its own until release.
func (cc *clusterCache) acquire() (*fitSnapshot, error) {
	cc.mu.Lock()
	var snap *schedcache.Snapshot
	if n := len(cc.idle); n > 0 {
		snap, cc.idle = cc.idle[n-1], cc.idle[:n-1]
	}
	cc.mu.Unlock()
	if snap == nil {
		snap = schedcache.NewEmptySnapshot()
	}
	if err := cc.cache.UpdateSnapshot(cc.logger, snap); err != nil {
		// The cache rebuilt the snapshot's lists; its error says they
		// were out of step, and this fit does not use it.
		return nil, fmt.Errorf("scheduler cache: %w", err)
	}
	all, err := snap.NodeInfos().List()
	if err != nil {
		return nil, fmt.Errorf("scheduler cache: %w", err)
	}
	gens := make([]int64, len(all))
	for i, ni := range all {
		gens[i] = ni.GetGeneration()
	}
	return &fitSnapshot{cc: cc, snap: snap, gens: gens}, nil
}

// save keeps a copy of ni before the fit changes it (copy-on-write: only
// the NodeInfos a fit places copies on are copied).
func (fs *fitSnapshot) save(ni *framework.NodeInfo) {
	if fs == nil {
		return
	}
	if _, ok := fs.saved[ni]; ok {
		return
	}
	if fs.saved == nil {
		fs.saved = map[*framework.NodeInfo]*framework.NodeInfo{}
	}
	fs.saved[ni] = ni.SnapshotConcrete()
}

// replace puts with in ni's place (a lost domain's node, domains.go),
// keeping ni as it was for restore. A shallow copy is enough: ni's maps
// and slices are not changed, only no longer referenced, until restore
// puts them back.
func (fs *fitSnapshot) replace(ni, with *framework.NodeInfo) {
	if _, ok := fs.saved[ni]; !ok {
		if fs.saved == nil {
			fs.saved = map[*framework.NodeInfo]*framework.NodeInfo{}
		}
		orig := *ni
		fs.saved[ni] = &orig
	}
	*ni = *with // the same pointer: the snapshot's lists hold it
}

// nodes are the snapshot's Nodes, in its order: the fit judges the
// nodes its NodeInfos hold, not another moment's list.
func (fs *fitSnapshot) nodes() []*corev1.Node {
	all, _ := fs.snap.NodeInfos().List()
	out := make([]*corev1.Node, 0, len(all))
	for _, ni := range all {
		out = append(out, ni.Node())
	}
	return out
}

// restore puts back the NodeInfos the fit changed, as they were when
// acquired: the next fit on the snapshot (a domain's, domains.go) starts
// from the cluster cache's state. The copies saved are dropped, since the
// NodeInfos now hold their maps and slices; the next change saves anew.
func (fs *fitSnapshot) restore() {
	for ni, orig := range fs.saved {
		*ni = *orig // the same pointer: the snapshot's lists hold it
	}
	clear(fs.saved)
}

// release restores what the fit changed and keeps the snapshot for the
// next fit; one with a change it cannot undo is dropped.
func (fs *fitSnapshot) release() {
	fs.restore()
	all, err := fs.snap.NodeInfos().List()
	if err != nil || len(all) != len(fs.gens) {
		return
	}
	for i, ni := range all {
		if ni.GetGeneration() != fs.gens[i] {
			return
		}
	}
	fs.cc.mu.Lock()
	defer fs.cc.mu.Unlock()
	if len(fs.cc.idle) < maxIdleSnapshots {
		fs.cc.idle = append(fs.cc.idle, fs.snap)
	}
}

// usage is the requests of the Pods bound to each of the snapshot's nodes
// (nodeUsage), summed again only for the NodeInfos whose generation moved
// since a fit last summed them: a steady scrape reads one generation per
// node instead of every bound Pod's quantities, which at 20,000 Pods was
// most of a fit's CPU (docs/scaling.md). A generation is never reused for
// other contents (the cache's counter is global), and release restores a
// NodeInfo with its generation, so equal generations are equal Pods. The
// sums are shared by fits and never written: a fit that places copies
// counts them apart (simulate). It must be called before the fit places
// any copy on the snapshot.
func (fs *fitSnapshot) usage() map[string]*nodeUse {
	all, _ := fs.snap.NodeInfos().List()
	use := make(map[string]*nodeUse, len(all))
	next := make(map[string]usageAt, len(all))
	cc := fs.cc
	cc.usageMu.Lock()
	defer cc.usageMu.Unlock()
	for _, ni := range all {
		name := ni.Node().Name
		m, ok := cc.usage[name]
		if !ok || m.gen != ni.GetGeneration() {
			m = usageAt{gen: ni.GetGeneration()}
			for _, pi := range ni.GetPods() {
				if m.use == nil {
					m.use = &nodeUse{}
				}
				m.use.addPod(pi.GetPod())
			}
		}
		// Rebuilt at every fit, so that Nodes gone from the cluster
		// leave the map: it holds at most one entry per Node.
		next[name] = m
		if m.use != nil {
			use[name] = m.use
		}
	}
	cc.usage = next
	return use
}

// followNominated counts the nominated watch's events in the cache's
// state (events): a fit reads those Pods too (nominated.go), so a result
// shared at one state must not outlive a change of them.
func (cc *clusterCache) followNominated(nominated cache.SharedIndexInformer) (cache.ResourceEventHandlerRegistration, error) {
	// Their terms may select namespaces too (needsNamespaces).
	count := func(obj any, n int64) {
		if p, ok := tombstone(obj).(*corev1.Pod); ok {
			cc.countTerms(p, n)
		}
	}
	reg, err := nominated.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			count(obj, 1)
			cc.events.Add(1)
		},
		UpdateFunc: func(oldObj, newObj any) {
			count(oldObj, -1)
			count(newObj, 1)
			cc.events.Add(1)
		},
		DeleteFunc: func(obj any) {
			count(obj, -1)
			cc.events.Add(1)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("scheduler cache: nominated pods: %w", err)
	}
	return reg, nil
}
