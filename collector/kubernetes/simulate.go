package kubernetes

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/interpodaffinity"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodeports"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/podtopologyspread"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// The fit runs three of kube-scheduler's own filter plugins, imported from
// k8s.io/kubernetes at the release the exporter's client is built for
// (docs/configuration.md: "Scheduling: schedule"): NodePorts (host
// ports, those hostNetwork implies included), InterPodAffinity (the
// Pod's required affinity and anti-affinity terms against the bound Pods,
// and the bound Pods' anti-affinity terms against the Pod) and
// PodTopologySpread (DoNotSchedule constraints). Their verdicts, in the
// scheduler's own words, join those of the filters fit.go writes.
//
// With these, copies of the Pod constrain each other: a copy holds its
// host port, repels the next by its anti-affinity and counts in its
// domain's spread. The fit then places copies one after another, as the
// scheduler binds the copies an operator creates, each on a node every
// filter passes, until none does (simulate).

// initSchedulerMetrics creates the scheduler's metric objects, which its
// parallelizer records to (a nil one panics), without registering them:
// they are kube-scheduler's, not the exporter's, and never served.
var initSchedulerMetrics = sync.OnceFunc(schedmetrics.InitMetrics)

// pluginFilter is one plugin's PreFilter and Filter, run by the fit.
type pluginFilter interface {
	fwk.PreFilterPlugin
	fwk.FilterPlugin
}

// judge holds the plugins and the scheduler's view of the cluster (its
// Snapshot of NodeInfos) for one fit.
type judge struct {
	ctx   context.Context
	state *framework.CycleState
	snap  *schedcache.Snapshot
	pod   *corev1.Pod
	// ports is NodePorts, nil when its PreFilter skipped the Pod (no host
	// port): the scheduler runs it before NodeResourcesFit. active are the
	// others whose PreFilter did not skip the Pod, in the scheduler's
	// order of filters (PodTopologySpread, InterPodAffinity), after it.
	// ext are those that follow the copies placed.
	ports  pluginFilter
	active []pluginFilter
	ext    []fwk.PreFilterExtensions
	// spread is PodTopologySpread when active: its AddPod keeps the
	// counts per domain but only the two smallest domains it tracked at
	// PreFilter (its critical paths), so that after copies fill those, a
	// third domain with fewer matching Pods would be missed and skews
	// allowed that the scheduler, which runs PreFilter for every Pod,
	// refuses. Its PreFilter is run again after each copy instead.
	spread pluginFilter
	// all are the NodeInfos PodTopologySpread's PreFilter reads: the
	// nodes', or when copies are placed one by one, one per group of
	// nodes it cannot tell apart (spreadGroups), groupOf each node's
	// group, which the copies placed on it join.
	all     []fwk.NodeInfo
	groupOf map[string]*framework.NodeInfo
	// nodes are the snapshot's NodeInfos, one per node; namespaces the
	// namespaces' labels by name; fts the feature gates the plugins
	// were built with (count.go reads them as the plugins do).
	nodes      []fwk.NodeInfo
	namespaces map[string]labels.Set
	fts        feature.Features
	// unresolvable is the cause every node takes when a PreFilter refused
	// the Pod outright ("" when none did).
	unresolvable string
	// copyInfo is the PodInfo of every copy placed (place).
	copyInfo *framework.PodInfo
	// close ends the framework's goroutines.
	close func()
	// fs is the cluster cache's snapshot the fit runs on (schedcache.go),
	// nil for one built for this fit alone: place saves each NodeInfo it
	// changes first, so that the snapshot is restored for the next fit.
	fs *fitSnapshot
	// ipa is InterPodAffinity's PreFilterExtensions when it is active:
	// the domains' fits (domains.go) remove a lost domain's Pods from its
	// state with them, as the scheduler's preemption does.
	ipa fwk.PreFilterExtensions
	// countOnly: only Copies are wanted (a domain's fit), not the causes
	// of the nodes that take none, nor the copies added to the state.
	countOnly bool
}

// ipaStateKey is where InterPodAffinity's PreFilter writes its state in
// the cycle state (its preFilterStateKey).
const ipaStateKey fwk.StateKey = "PreFilter" + interpodaffinity.Name

// ipaReuse is InterPodAffinity's PreFilter state of an earlier judge of
// the same Pod's terms on the same bound Pods, written instead of running
// its PreFilter again: that PreFilter matches every bound Pod's
// anti-affinity terms, the largest part of a fit where Pods carry terms
// (docs/scaling.md). Its verdict never reads the Pod's node affinity, so
// it holds for the Pod pinned to a domain. A nil state: the PreFilter
// skipped the Pod.
type ipaReuse struct {
	state fwk.StateData
	// ext is the plugin that made state (nil when it skipped the Pod),
	// whose RemovePod takes a lost domain's Pods out of it.
	ext fwk.PreFilterExtensions
}

// newJudge builds the plugins on a Snapshot of the caches' Nodes and bound
// Pods, with the namespaces (for namespaceSelector terms), and runs their
// PreFilter for pod. The feature gates are the scheduler's defaults at
// this release.
func newJudge(ctx context.Context, pod *corev1.Pod, fs *fitSnapshot, nodes []*corev1.Node, pods []*corev1.Pod, namespaces []*corev1.Namespace) (*judge, error) {
	return newJudgeWith(ctx, pod, fs, nodes, pods, namespaces, fitOptions{})
}

// newJudgeWith is newJudge with InterPodAffinity's state taken from
// opts.ipa when not nil, and kept in opts.keepIPA when not nil.
func newJudgeWith(ctx context.Context, pod *corev1.Pod, fs *fitSnapshot, nodes []*corev1.Node, pods []*corev1.Pod, namespaces []*corev1.Namespace, opts fitOptions) (*judge, error) {
	reuse := opts.ipa
	ctx = klog.NewContext(ctx, klog.Background().V(10)) // the plugins' own logs stay quiet
	initSchedulerMetrics()
	var snap *schedcache.Snapshot
	if fs != nil {
		// The cluster cache's: every bound Pod, its terms parsed when its
		// event arrived.
		snap = fs.snap
	} else {
		known := make(map[string]bool, len(nodes))
		for _, n := range nodes {
			known[n.Name] = true
		}
		sel := termSelectors(pod)
		var bound []*corev1.Pod
		for _, p := range pods {
			// A Pod bound to a node the cache does not hold (deleted, or not
			// listed yet) has no node for the plugins to read labels from.
			if p.Spec.NodeName != "" && known[p.Spec.NodeName] && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed && sel.relevant(p) {
				bound = append(bound, leanPod(p))
			}
		}
		snap = schedcache.NewSnapshot(bound, nodes)
	}
	// The plugins read namespaces through an informer's lister; its store
	// is filled here from the exporter's own cache, and never started.
	factory := informers.NewSharedInformerFactory(nil, 0)
	nsInformer := factory.Core().V1().Namespaces().Informer()
	for _, ns := range namespaces {
		if err := nsInformer.GetIndexer().Add(ns); err != nil {
			return nil, fmt.Errorf("scheduler plugins: namespace %s: %w", ns.Name, err)
		}
	}
	// The framework's metrics recorder runs until fctx ends: close.
	fctx, cancel := context.WithCancel(ctx)
	fh, err := frameworkruntime.NewFramework(fctx, nil, nil,
		frameworkruntime.WithSnapshotSharedLister(snap),
		frameworkruntime.WithInformerFactory(factory),
		frameworkruntime.WithParallelism(2))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("scheduler framework: %w", err)
	}
	j := &judge{ctx: ctx, state: framework.NewCycleState(), snap: snap, pod: pod, fs: fs,
		close: func() { cancel(); frameworkruntime.WaitForShutdown(fh) }}
	ok := false
	defer func() {
		if !ok {
			j.close()
		}
	}()
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	ports, err := nodeports.New(ctx, nil, fh, fts)
	if err != nil {
		return nil, fmt.Errorf("scheduler plugin NodePorts: %w", err)
	}
	// List defaulting without default constraints: the scheduler's system
	// defaults are ScheduleAnyway constraints, which only score.
	spread, err := podtopologyspread.New(ctx, &config.PodTopologySpreadArgs{DefaultingType: config.ListDefaulting}, fh, fts)
	if err != nil {
		return nil, fmt.Errorf("scheduler plugin PodTopologySpread: %w", err)
	}
	ipa, err := interpodaffinity.New(ctx, &config.InterPodAffinityArgs{HardPodAffinityWeight: 1}, fh, fts)
	if err != nil {
		return nil, fmt.Errorf("scheduler plugin InterPodAffinity: %w", err)
	}
	all, err := snap.NodeInfos().List()
	if err != nil {
		return nil, fmt.Errorf("scheduler snapshot: %w", err)
	}
	j.all, j.nodes, j.fts = all, all, fts
	j.namespaces = make(map[string]labels.Set, len(namespaces))
	for _, ns := range namespaces {
		j.namespaces[ns.Name] = ns.Labels
	}
	for _, p := range []fwk.Plugin{ports, spread, ipa} {
		pf, isFilter := p.(pluginFilter)
		if !isFilter {
			return nil, fmt.Errorf("scheduler plugin %s has no PreFilter and Filter", p.Name())
		}
		var st *fwk.Status
		if reuse != nil && pf.Name() == interpodaffinity.Name {
			if reuse.state == nil {
				st = fwk.NewStatus(fwk.Skip)
			} else {
				j.state.Write(ipaStateKey, reuse.state.Clone())
			}
		} else {
			_, st = pf.PreFilter(ctx, j.state, pod, all)
		}
		if err := fitCut(ctx, pf.Name()+"'s PreFilter"); err != nil {
			return nil, err
		}
		switch {
		case st.IsSkip():
			continue
		case !st.IsSuccess():
			// A Pod the plugin cannot judge (a term it cannot parse):
			// the scheduler leaves it pending on every node.
			j.unresolvable = statusCause(st)
			ok = true
			return j, nil
		}
		switch pf.Name() {
		case nodeports.Name:
			j.ports = pf
			continue
		case podtopologyspread.Name:
			// Its state is computed anew for each copy (place).
			j.spread = pf
		default:
			if e := pf.PreFilterExtensions(); e != nil {
				j.ext = append(j.ext, e)
				if pf.Name() == interpodaffinity.Name {
					j.ipa = e
				}
			}
		}
		j.active = append(j.active, pf)
	}
	if opts.keepIPA != nil {
		// Before any copy is added to it.
		*opts.keepIPA = &ipaReuse{ext: j.ipa}
		if st, err := j.state.Read(ipaStateKey); err == nil {
			(*opts.keepIPA).state = st.Clone()
		}
	}
	ok = true
	return j, nil
}

// statusCause is a plugin status's reasons as one cause.
func statusCause(st *fwk.Status) string {
	r := st.Reasons()
	switch len(r) {
	case 0:
		return st.Code().String()
	case 1:
		return r[0]
	}
	return fmt.Sprint(r)
}

// filterPorts runs NodePorts on the node: its cause, "" when it passes.
// A copy placed only adds ports, so a node it refuses stays refused.
func (j *judge) filterPorts(ni fwk.NodeInfo) (cause string, final bool) {
	if j.unresolvable != "" {
		return j.unresolvable, true
	}
	if j.ports == nil {
		return "", false
	}
	return j.run(ni, []pluginFilter{j.ports})
}

// filter runs the other active plugins on the node, in order: the first
// that fails names the cause; "" when every one passes.
func (j *judge) filter(ni fwk.NodeInfo) (cause string, final bool) {
	if j.unresolvable != "" {
		return j.unresolvable, true
	}
	if len(j.active) == 0 {
		return "", false
	}
	return j.run(ni, j.active)
}

func (j *judge) run(ni fwk.NodeInfo, plugins []pluginFilter) (cause string, final bool) {
	for _, p := range plugins {
		st := p.Filter(j.ctx, j.state, j.pod, ni)
		if st.IsSuccess() {
			continue
		}
		c := statusCause(st)
		// A copy placed only adds ports and anti-affinity: a node these
		// refuse stays refused. Spread and required affinity may admit
		// the node once copies land elsewhere.
		final = p.Name() == nodeports.Name ||
			p.Name() == interpodaffinity.Name && c != interpodaffinity.ErrReasonAffinityRulesNotMatch
		return c, final
	}
	return "", false
}

// place adds a copy of the Pod to the node, as the scheduler's cache
// assumes a bound Pod (add), and computes PodTopologySpread's state anew.
func (j *judge) place(ni fwk.NodeInfo) error {
	if err := j.add(ni); err != nil {
		return err
	}
	return j.respread()
}

// copyPodInfo is the PodInfo of every copy: the plugins read a placed
// Pod's labels, namespace, ports and terms, never its name or node, and
// parsing its terms once spares a scrape 1,000 parses.
func (j *judge) copyPodInfo() (*framework.PodInfo, error) {
	if j.copyInfo == nil {
		cp := leanPod(j.pod)
		cp.Name += "-copy"
		cp.UID += "-copy"
		pi, err := framework.NewPodInfo(cp)
		if err != nil {
			return nil, fmt.Errorf("scheduler plugins: copy of the pod: %w", err)
		}
		j.copyInfo = pi
	}
	return j.copyInfo, nil
}

// add adds a copy to the node's NodeInfo (its ports, its terms), to its
// group's (spreadGroups) and to the state of the plugins that follow the
// copies placed (InterPodAffinity's counts per topology pair).
func (j *judge) add(ni fwk.NodeInfo) error {
	name := ni.Node().Name
	pi, err := j.copyPodInfo()
	if err != nil {
		return err
	}
	concrete, ok := ni.(*framework.NodeInfo)
	if !ok {
		return fmt.Errorf("scheduler snapshot: node %s is a %T", name, ni)
	}
	j.fs.save(concrete)
	concrete.AddPodInfo(pi)
	if g := j.groupOf[name]; g != nil {
		g.AddPodInfo(pi)
	}
	for _, e := range j.ext {
		if st := e.AddPod(j.ctx, j.state, j.pod, pi, ni); !st.IsSuccess() {
			return fmt.Errorf("scheduler plugins: %s", statusCause(st))
		}
	}
	return nil
}

// respread runs PodTopologySpread's PreFilter again over the copies
// placed: its own AddPod keeps the counts per domain but only the two
// smallest domains, which after copies fill those misses a third.
func (j *judge) respread() error {
	if j.spread != nil {
		_, st := j.spread.PreFilter(j.ctx, j.state, j.pod, j.all)
		if err := fitCut(j.ctx, "PodTopologySpread's PreFilter"); err != nil {
			return err
		}
		if !st.IsSuccess() {
			return fmt.Errorf("scheduler plugin PodTopologySpread: %s", statusCause(st))
		}
	}
	return nil
}

// fitCut is the error of a fit whose context ended during stage, nil
// while it has not. kube-scheduler's PreFilters of InterPodAffinity and
// PodTopologySpread run a parallelizer that stops at a done context and
// leaves uncounted what it did not reach, without an error: past the
// deadline their verdicts admit nodes they would refuse. So a fit cut
// short is no count at all (docs/configuration.md: "Timeouts"), and the
// check says Timeout (schedule).
func fitCut(ctx context.Context, stage string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("the fit was cut short by the deadline during %s: %w", stage, err)
	}
	return nil
}

// copiesInteract says whether one copy of the Pod changes where the next
// may go: it holds a host port, has required pod affinity or
// anti-affinity terms, or a DoNotSchedule spread constraint. Preferred
// terms and ScheduleAnyway constraints only score.
func copiesInteract(pod *corev1.Pod) bool {
	if len(schedutil.GetHostPorts(pod)) > 0 {
		return true
	}
	if a := pod.Spec.Affinity; a != nil {
		if a.PodAffinity != nil && len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 ||
			a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
			return true
		}
	}
	for _, c := range pod.Spec.TopologySpreadConstraints {
		if c.WhenUnsatisfiable == corev1.DoNotSchedule {
			return true
		}
	}
	return false
}

// maxPlaced bounds the copies placed one by one: past it the fit says
// "at least", which no quota nor operator needs exceeded.
const maxPlaced = 100_000

// fitWithPlugins is the fit of the Pod on the nodes with the scheduler's
// plugins besides fit.go's filters, its copies bounded by limit (the
// quota's capacity, or MaxCapacity). Copies that do not interact are
// counted per node, as fit does; those that do are placed one after
// another (simulate).
func fitWithPlugins(ctx context.Context, pod *corev1.Pod, nodes []*corev1.Node, pods []*corev1.Pod, namespaces []*corev1.Namespace, limit int64) (FitResult, error) {
	return fitWithPluginsOn(ctx, pod, nil, nodes, pods, namespaces, limit)
}

// fitWithPluginsOn is fitWithPlugins on the cluster cache's snapshot fs
// (the nodes are fs.nodes()), or on one built from nodes and pods when fs
// is nil.
func fitWithPluginsOn(ctx context.Context, pod *corev1.Pod, fs *fitSnapshot, nodes []*corev1.Node, pods []*corev1.Pod, namespaces []*corev1.Namespace, limit int64) (FitResult, error) {
	return fitOn(ctx, pod, fs, nodes, pods, nil, namespaces, limit)
}

// fitOn is fitWithPluginsOn with the bound Pods' requests per node
// already summed (use; nil: summed here, from the cluster cache's kept
// sums when fs is not nil): the domains' fits (domains.go) share the
// entry fit's. pods are read only when fs is nil.
func fitOn(ctx context.Context, pod *corev1.Pod, fs *fitSnapshot, nodes []*corev1.Node, pods []*corev1.Pod, use map[string]*nodeUse, namespaces []*corev1.Namespace, limit int64) (FitResult, error) {
	return fitOnWith(ctx, pod, fs, nodes, pods, use, namespaces, limit, fitOptions{})
}

// fitOptions are what a domain's fit (domains.go) changes in fitOn.
type fitOptions struct {
	// countOnly: only FitResult.Copies and Bounded are wanted.
	countOnly bool
	// ipa, when not nil, is InterPodAffinity's state to start from.
	ipa *ipaReuse
	// keepIPA, when not nil, is set to InterPodAffinity's state after the
	// PreFilters, for the domains' fits; to nil when a PreFilter found
	// the Pod unresolvable.
	keepIPA **ipaReuse
	// keepUse, when not nil, is set to the bound Pods' requests per node
	// the fit read, for the domains' fits.
	keepUse *map[string]*nodeUse
}

// fitOnWith is fitOn with opts.
func fitOnWith(ctx context.Context, pod *corev1.Pod, fs *fitSnapshot, nodes []*corev1.Node, pods []*corev1.Pod, use map[string]*nodeUse, namespaces []*corev1.Namespace, limit int64, opts fitOptions) (FitResult, error) {
	j, err := newJudgeWith(ctx, pod, fs, nodes, pods, namespaces, opts)
	if err != nil {
		return FitResult{}, err
	}
	defer j.close()
	j.countOnly = opts.countOnly
	if fs != nil {
		// Nominated Pods join their nodes before the requests are summed
		// (nominated.go); restore takes them out again between fits.
		if err := j.addNominated(fs.nominated); err != nil {
			return FitResult{}, err
		}
	}
	if use == nil {
		// Kept per node on the cluster cache between fits (usage); a
		// domain's fit passes the entry fit's sums instead, since its
		// lost nodes must not replace them.
		if fs != nil {
			use = fs.usage()
		} else {
			use = nodeUsage(pods)
		}
	}
	if opts.keepUse != nil {
		*opts.keepUse = use
	}
	var r FitResult
	if !copiesInteract(pod) {
		r = fitNodes(pod, nodes, use, j)
	} else if r, err = fitCopies(pod, nodes, use, j, min(limit, maxPlaced)); err != nil {
		return FitResult{}, err
	}
	// The plugins' Filters and the placing stop at nothing: a context that
	// ended during them may have cut a PreFilter run since (place).
	if err := fitCut(ctx, "the filters"); err != nil {
		return FitResult{}, err
	}
	return r, nil
}

// fitCopies is the fit of copies that constrain each other: counted
// where their shape has a count (count.go), else placed one by one.
func fitCopies(pod *corev1.Pod, nodes []*corev1.Node, use map[string]*nodeUse, j *judge, limit int64) (FitResult, error) {
	sh, ok, err := shapeOf(pod, j)
	if err != nil {
		return FitResult{}, err
	}
	if ok {
		r, counted, err := countCopies(pod, nodes, use, j, sh, limit)
		if err != nil || counted {
			return r, err
		}
	}
	return simulate(pod, nodes, use, j, limit)
}

// simulate places copies of the Pod one after another, each on the first
// node (in the caches' order) that every filter passes, until none does
// or limit are placed. It is the fit of the copies whose interaction has
// no count (count.go), and the reference the count is tested against.
// Where the scheduler's scoring would pick another node the count is the
// same: with one copy per node (host port, anti-affinity per node) or per
// domain (anti-affinity per zone) any feasible node takes one; with a
// spread constraint, a domain takes a copy whenever it is within the
// skew, so every order fills the domains to the same bound.
func simulate(pod *corev1.Pod, nodes []*corev1.Node, use map[string]*nodeUse, j *judge, limit int64) (FitResult, error) {
	if j.spread != nil && j.groupOf == nil {
		// PodTopologySpread's PreFilter runs after each copy: on the
		// groups, it costs the domains, not the nodes.
		j.all, j.groupOf = spreadGroups(pod, j.nodes)
	}
	need := needOf(pod)
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	// placed are the copies on each node, by its index in nodes.
	placed := make([]int64, len(nodes))
	type cand struct {
		i    int
		node *corev1.Node
		ni   fwk.NodeInfo
		use  *nodeUse
	}
	cands := make([]*cand, 0, len(nodes))
	for i, n := range nodes {
		if nodeCause(pod, n, affinity, use[n.Name]) != "" {
			continue
		}
		ni, err := j.snap.NodeInfos().Get(n.Name)
		if err != nil {
			return FitResult{}, fmt.Errorf("scheduler snapshot: %w", err)
		}
		// The copies' use is counted apart: the final causes (fitCauses)
		// read the bound Pods'.
		u := &nodeUse{}
		if b := use[n.Name]; b != nil {
			*u = *b
			u.scalar = maps.Clone(b.scalar)
		}
		cands = append(cands, &cand{i: i, node: n, ni: ni, use: u})
	}
	// next is where the scan resumes: the scheduler too starts each
	// Pod's search where the last one left off (its nextStartNodeIndex).
	next := 0
	var copies int64
	for copies < limit && len(cands) > 0 {
		var chosen *cand
		n := len(cands)
		start := next % n
		for k := range n {
			c := cands[(start+k)%n]
			if reason, final := j.filterPorts(c.ni); reason != "" {
				if final {
					c.node = nil
				}
				continue
			}
			if n, _ := copiesOn(need, c.node, c.use); n == 0 {
				c.node = nil // resources only shrink as copies land
				continue
			}
			if reason, final := j.filter(c.ni); reason != "" {
				if final {
					c.node = nil
				}
				continue
			}
			chosen = c
			break
		}
		// Each round is a pass of the filters over the nodes.
		if err := fitCut(j.ctx, fmt.Sprintf("the placing of copy %d", copies+1)); err != nil {
			return FitResult{}, err
		}
		if chosen == nil {
			break
		}
		if err := j.place(chosen.ni); err != nil {
			return FitResult{}, err
		}
		chosen.use.add(need)
		placed[chosen.i]++
		copies++
		// Drop the nodes refused for good; resume after the chosen one.
		keep := cands[:0]
		next = 0
		for _, c := range cands {
			if c.node == nil {
				continue
			}
			keep = append(keep, c)
			if c == chosen {
				next = len(keep)
			}
		}
		cands = keep
	}
	return fitCauses(pod, nodes, use, j, placed, copies >= limit)
}

// fitCauses is the result of copies placed on the nodes (placed, by
// index in nodes; the judge's state holds them): the nodes that took one
// or more, and for each of the others the cause the scheduler would give
// the next copy there, the first filter that refuses it in the scheduler's
// order (the node filters of fit.go, NodePorts, NodeResourcesFit, then
// PodTopologySpread and InterPodAffinity), as its FailedScheduling event
// would. bounded says the placing stopped at the limit, not where no node
// took another.
func fitCauses(pod *corev1.Pod, nodes []*corev1.Node, use map[string]*nodeUse, j *judge, placed []int64, bounded bool) (FitResult, error) {
	need := needOf(pod)
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	r := FitResult{Nodes: len(nodes), Causes: map[string]int{}, Bounded: bounded}
	for i, n := range nodes {
		if placed[i] > 0 {
			r.Fitting++
			r.Copies += placed[i]
			continue
		}
		if j.countOnly {
			continue
		}
		cause := nodeCause(pod, n, affinity, use[n.Name])
		if cause == "" {
			ni, err := j.snap.NodeInfos().Get(n.Name)
			if err != nil {
				return FitResult{}, fmt.Errorf("scheduler snapshot: %w", err)
			}
			cause, _ = j.filterPorts(ni)
			if cause == "" {
				if c, short := copiesOn(need, n, use[n.Name]); c == 0 {
					for _, s := range short {
						r.Causes[s]++
					}
					continue
				}
				cause, _ = j.filter(ni)
			}
		}
		if cause != "" {
			r.Causes[cause]++
		}
	}
	return r, nil
}

// fitNodes is fit with the plugins' filters, for a Pod whose copies do not
// interact: each node that every filter passes takes as many copies as
// its free resources hold. A bound Pod's anti-affinity that repels the
// Pod is the same for every copy.
func fitNodes(pod *corev1.Pod, nodes []*corev1.Node, use map[string]*nodeUse, j *judge) FitResult {
	need := needOf(pod)
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	r := FitResult{Nodes: len(nodes), Causes: map[string]int{}}
	for _, node := range nodes {
		cause := nodeCause(pod, node, affinity, use[node.Name])
		var ni fwk.NodeInfo
		if cause == "" {
			var err error
			if ni, err = j.snap.NodeInfos().Get(node.Name); err != nil {
				cause = err.Error()
			} else {
				cause, _ = j.filterPorts(ni)
			}
		}
		if cause != "" {
			r.Causes[cause]++
			continue
		}
		n, short := copiesOn(need, node, use[node.Name])
		if n == 0 {
			for _, s := range short {
				r.Causes[s]++
			}
			continue
		}
		if cause, _ = j.filter(ni); cause != "" {
			r.Causes[cause]++
			continue
		}
		r.Fitting++
		r.Copies = min(r.Copies+min(n, provider.MaxCapacity), provider.MaxCapacity)
	}
	return r
}

// keepSchedulingTerms adds to the watch cache's copy of a bound Pod what
// the plugins read of it: its labels (matched by the Pod's affinity terms
// and spread selectors), its host ports (in its one container) and its
// required pod affinity and anti-affinity terms (an anti-affinity term
// of a bound Pod repels the Pod). Preferred terms only score; node
// affinity of a bound Pod no longer matters.
func keepSchedulingTerms(p, out *corev1.Pod) {
	out.Labels = p.Labels
	if ports := schedutil.GetHostPorts(p); len(ports) > 0 {
		if len(out.Spec.Containers) == 0 {
			out.Spec.Containers = []corev1.Container{{}}
		}
		out.Spec.Containers[0].Ports = ports
	}
	a := p.Spec.Affinity
	if a == nil {
		return
	}
	var keep corev1.Affinity
	if a.PodAffinity != nil && len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
		keep.PodAffinity = &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution}
	}
	if a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
		keep.PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution}
	}
	if keep.PodAffinity != nil || keep.PodAntiAffinity != nil {
		out.Spec.Affinity = &keep
	}
}

// selectors are the label selectors of the Pod's required affinity and
// anti-affinity terms and of its spread constraints; all when one cannot
// be read (the plugin then says why).
type selectors struct {
	all  bool
	sels []labels.Selector
}

func termSelectors(pod *corev1.Pod) selectors {
	var s selectors
	add := func(ls *metav1.LabelSelector) {
		if ls == nil {
			return // matches no Pod
		}
		sel, err := metav1.LabelSelectorAsSelector(ls)
		if err != nil {
			s.all = true
			return
		}
		s.sels = append(s.sels, sel)
	}
	if a := pod.Spec.Affinity; a != nil {
		if a.PodAffinity != nil {
			for _, t := range a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
				add(t.LabelSelector)
			}
		}
		if a.PodAntiAffinity != nil {
			for _, t := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
				add(t.LabelSelector)
			}
		}
	}
	for _, c := range pod.Spec.TopologySpreadConstraints {
		add(c.LabelSelector)
	}
	return s
}

// relevant says whether a bound Pod can change a plugin's verdict on the
// Pod: it holds a host port, has required pod affinity or anti-affinity
// terms of its own, or its labels match a selector of the Pod's terms
// (the plugins then check namespaces and matchLabelKeys, which only
// narrow the match). The others, most Pods of a cluster, stay out of the
// plugins' snapshot, which would otherwise sum every Pod's requests again
// on each scrape: the fit counts resources itself (copiesOn).
func (s selectors) relevant(p *corev1.Pod) bool {
	if s.all || len(schedutil.GetHostPorts(p)) > 0 {
		return true
	}
	if a := p.Spec.Affinity; a != nil && (a.PodAffinity != nil || a.PodAntiAffinity != nil) {
		return true
	}
	if len(p.Labels) == 0 {
		return false
	}
	set := labels.Set(p.Labels)
	for _, sel := range s.sels {
		if sel.Matches(set) {
			return true
		}
	}
	return false
}

// leanPod is a Pod as the plugins' snapshot holds it: its metadata,
// affinity and host ports, without requests (NodeInfo sums them, and no
// plugin the fit runs reads the sum).
func leanPod(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{ObjectMeta: p.ObjectMeta, Status: corev1.PodStatus{Phase: p.Status.Phase}}
	out.Spec = corev1.PodSpec{NodeName: p.Spec.NodeName, Affinity: p.Spec.Affinity,
		TopologySpreadConstraints: p.Spec.TopologySpreadConstraints, HostNetwork: p.Spec.HostNetwork}
	if ports := schedutil.GetHostPorts(p); len(ports) > 0 {
		out.Spec.Containers = []corev1.Container{{Ports: ports}}
	}
	return out
}

// spreadGroups folds the nodes into what PodTopologySpread's PreFilter
// needs of them, so that running it after each copy costs the number of
// domains, not of nodes: it counts, per domain of each constraint, the
// matching Pods on the nodes that hold every constraint's key and pass the
// inclusion policies (the Pod's node affinity, the untolerated taints).
// Nodes with the same value of each key, the same node affinity verdict
// and the same taints are alike to it: each group is one NodeInfo, its
// first node's, holding the Pods of all of them.
func spreadGroups(pod *corev1.Pod, all []fwk.NodeInfo) ([]fwk.NodeInfo, map[string]*framework.NodeInfo) {
	var keys []string
	for _, c := range pod.Spec.TopologySpreadConstraints {
		keys = append(keys, c.TopologyKey)
	}
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	sel := termSelectors(pod)
	groups := map[string]*framework.NodeInfo{}
	groupOf := make(map[string]*framework.NodeInfo, len(all))
	var out []fwk.NodeInfo
	var b strings.Builder
	for _, ni := range all {
		node := ni.Node()
		b.Reset()
		for _, k := range keys {
			if v, ok := node.Labels[k]; ok {
				fmt.Fprintf(&b, "%d:%s", len(v), v)
			} else {
				b.WriteString("-")
			}
		}
		match, err := affinity.Match(node)
		fmt.Fprintf(&b, "|%v|%v|", match, err != nil)
		for _, t := range node.Spec.Taints {
			fmt.Fprintf(&b, "%d:%s%d:%s%s;", len(t.Key), t.Key, len(t.Value), t.Value, t.Effect)
		}
		g := groups[b.String()]
		if g == nil {
			g = framework.NewNodeInfo()
			g.SetNode(node)
			groups[b.String()] = g
			out = append(out, g)
		}
		for _, p := range ni.GetPods() {
			// The cluster cache's NodeInfos hold every bound Pod: only
			// those a spread selector can match are counted.
			if sel.relevant(p.GetPod()) {
				g.AddPodInfo(p)
			}
		}
		groupOf[node.Name] = g
	}
	return out, groupOf
}
