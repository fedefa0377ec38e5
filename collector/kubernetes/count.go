package kubernetes

import (
	"fmt"
	"slices"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/podtopologyspread"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"
)

// Copies that constrain each other are counted at the cost of the
// constraint, not of the copies (docs/configuration.md: "Scheduling:
// schedule"). Placing them one by one (simulate) runs PodTopologySpread's
// PreFilter over every copy placed after each, quadratic in the copies:
// 100,000 copies on 100 Nodes did not end in a scrape. The plugins still
// decide which nodes are feasible, with no copy placed; what a copy
// changes is arithmetic:
//
//   - a host port: at most one copy per node;
//   - required anti-affinity terms the copies match (one topology key):
//     at most one copy per domain of that key;
//   - one DoNotSchedule spread constraint the copies count in: each
//     domain filled to a bound that maxSkew and minDomains give from the
//     domains' own capacity (spreadCounts).
//
// The copies counted are then added to the plugins' state at once, and
// the plugins give the causes of the nodes that take none (fitCauses).
// Other shapes (affinity to the copies' own labels, anti-affinity over two
// keys, several constraints the copies count in) are placed one by one.
// TestCountEqualsPlacing holds the count equal to simulate's placing on
// hundreds of random clusters.

// copyShape is how copies of the Pod constrain each other.
type copyShape struct {
	// ports: a host port, one copy per node.
	ports bool
	// antiKey is the topology key of the Pod's required anti-affinity
	// terms that its copies match: one copy per domain of it ("" none).
	antiKey string
	// spread is the DoNotSchedule constraint the copies count in, nil
	// when none does (those they do not count in never change).
	spread *spreadRule
}

// spreadRule is a DoNotSchedule constraint as PodTopologySpread reads it
// (its filterTopologySpreadConstraints).
type spreadRule struct {
	key                        string
	maxSkew, minDomains        int64
	selector                   labels.Selector
	affinityHonor, taintsHonor bool
}

// shapeOf is the Pod's copyShape; ok false when the copies' interaction
// has no count here, and they are placed one by one.
func shapeOf(pod *corev1.Pod, j *judge) (copyShape, bool, error) {
	var sh copyShape
	if j.unresolvable != "" {
		return sh, false, nil
	}
	sh.ports = len(schedutil.GetHostPorts(pod)) > 0
	pi, err := j.copyPodInfo()
	if err != nil {
		return sh, false, err
	}
	cp := pi.GetPod()
	ns := j.namespaces[cp.Namespace]
	for _, t := range pi.GetRequiredAffinityTerms() {
		if t.Matches(cp, ns) {
			// The first copy decides where the others may go.
			return sh, false, nil
		}
	}
	for _, t := range pi.GetRequiredAntiAffinityTerms() {
		if !t.Matches(cp, ns) {
			continue
		}
		if sh.antiKey != "" && sh.antiKey != t.TopologyKey {
			return sh, false, nil
		}
		sh.antiKey = t.TopologyKey
	}
	var rules []*spreadRule
	counted := false
	for _, c := range pod.Spec.TopologySpreadConstraints {
		if c.WhenUnsatisfiable != corev1.DoNotSchedule {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
		if err != nil {
			return sh, false, nil // the plugin's PreFilter refused it
		}
		if j.fts.EnableMatchLabelKeysInPodTopologySpread && len(c.MatchLabelKeys) > 0 {
			sel = mergeMatchLabelKeys(pod.Labels, c.MatchLabelKeys, sel)
		}
		r := &spreadRule{key: c.TopologyKey, maxSkew: int64(c.MaxSkew), minDomains: 1, selector: sel, affinityHonor: true}
		if c.MinDomains != nil {
			r.minDomains = int64(*c.MinDomains)
		}
		if j.fts.EnableNodeInclusionPolicyInPodTopologySpread {
			r.affinityHonor = c.NodeAffinityPolicy == nil || *c.NodeAffinityPolicy == corev1.NodeInclusionPolicyHonor
			r.taintsHonor = c.NodeTaintsPolicy != nil && *c.NodeTaintsPolicy == corev1.NodeInclusionPolicyHonor
		}
		rules = append(rules, r)
		// The plugin counts no Pod for an empty selector, but matches
		// the Pod itself: such a constraint never changes.
		if !sel.Empty() && sel.Matches(labels.Set(cp.Labels)) {
			counted = true
		}
	}
	if counted {
		if len(rules) != 1 || rules[0].maxSkew < 1 {
			return sh, false, nil
		}
		sh.spread = rules[0]
	}
	return sh, true, nil
}

// mergeMatchLabelKeys is the plugin's mergeLabelSetWithSelector: the
// Pod's values of the keys required besides the selector.
func mergeMatchLabelKeys(podLabels map[string]string, keys []string, sel labels.Selector) labels.Selector {
	set := labels.Set{}
	for _, k := range keys {
		if v, ok := podLabels[k]; ok {
			set[k] = v
		}
	}
	if len(set) == 0 {
		return sel
	}
	reqs, ok := sel.Requirements()
	if !ok {
		return sel
	}
	merged := labels.SelectorFromSet(set)
	for _, r := range reqs {
		merged = merged.Add(r)
	}
	return merged
}

// unit is a set of nodes that takes copies together: one node, or the
// nodes of one domain of the anti-affinity key, which takes one copy.
type unit struct {
	nodes []int // indexes in nodes
	caps  []int64
	one   bool
}

func (u *unit) capacity() int64 {
	var sum int64
	for _, c := range u.caps {
		sum, _ = satAdd(sum, c)
	}
	if u.one {
		return min(sum, 1)
	}
	return sum
}

// countCopies counts the copies of a Pod of shape sh, at most limit, and
// adds them to the judge's state; ok false when the nodes' domains do not
// nest as the count needs (then they are placed one by one).
func countCopies(pod *corev1.Pod, nodes []*corev1.Node, use map[string]*nodeUse, j *judge, sh copyShape, limit int64) (FitResult, bool, error) {
	need := needOf(pod)
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	// The filters that never change as copies land: all but a spread
	// constraint the copies count in, judged here with none placed.
	static := j.active
	if sh.spread != nil {
		static = nil
		for _, p := range j.active {
			if p.Name() != podtopologyspread.Name {
				static = append(static, p)
			}
		}
	}
	var units []*unit
	byDomain := map[string]*unit{}
	for i, n := range nodes {
		if nodeCause(pod, n, affinity, use[n.Name]) != "" {
			continue
		}
		ni, err := j.snap.NodeInfos().Get(n.Name)
		if err != nil {
			return FitResult{}, false, fmt.Errorf("scheduler snapshot: %w", err)
		}
		if c, _ := j.filterPorts(ni); c != "" {
			continue
		}
		cp, _ := copiesOn(need, n, use[n.Name])
		if cp == 0 {
			continue
		}
		if c, _ := j.run(ni, static); c != "" {
			continue
		}
		if sh.spread != nil {
			if _, ok := n.Labels[sh.spread.key]; !ok {
				continue
			}
		}
		if sh.ports {
			cp = 1
		}
		if v, ok := n.Labels[sh.antiKey]; ok && sh.antiKey != "" {
			u := byDomain[v]
			if u == nil {
				u = &unit{one: true}
				byDomain[v] = u
				units = append(units, u)
			}
			u.nodes, u.caps = append(u.nodes, i), append(u.caps, cp)
			continue
		}
		units = append(units, &unit{nodes: []int{i}, caps: []int64{cp}})
	}
	if err := fitCut(j.ctx, "the filters"); err != nil {
		return FitResult{}, false, err
	}
	var perUnit []int64
	if sh.spread == nil {
		caps := make([]int64, len(units))
		for k, u := range units {
			caps[k] = u.capacity()
		}
		perUnit = evenFill(caps, limit)
	} else {
		var ok bool
		if perUnit, ok = spreadCounts(pod, nodes, units, j, sh.spread, affinity, limit); !ok {
			return FitResult{}, false, nil
		}
	}
	placed := make([]int64, len(nodes))
	var copies int64
	for k, u := range units {
		for m, c := range evenFill(u.caps, perUnit[k]) {
			placed[u.nodes[m]] = c
			copies += c
		}
	}
	if j.countOnly {
		// The copies are added to the state only for the causes of the
		// nodes that take none.
		r, err := fitCauses(pod, nodes, use, j, placed, copies >= limit)
		return r, true, err
	}
	for i, n := range placed {
		if n == 0 {
			continue
		}
		ni, err := j.snap.NodeInfos().Get(nodes[i].Name)
		if err != nil {
			return FitResult{}, false, fmt.Errorf("scheduler snapshot: %w", err)
		}
		for range n {
			if err := j.add(ni); err != nil {
				return FitResult{}, false, err
			}
		}
	}
	if err := j.respread(); err != nil {
		return FitResult{}, false, err
	}
	r, err := fitCauses(pod, nodes, use, j, placed, copies >= limit)
	return r, true, err
}

// spreadCounts is how many copies each unit takes under the spread
// constraint sp, at most limit in all. With e_d the matching Pods of
// domain d and c_d the copies its units take, placing a copy wherever the
// skew allows ends, in any order, with every domain at
// max(e_d, min(e_d + c_d, T + maxSkew)), T the least of e_d + c_d over the
// domains (0 with fewer domains than minDomains): a domain at the least
// count can always take one more until it is full, so the least ends at
// T, and no copy lands more than maxSkew above it. ok false when a domain
// of the anti-affinity key spans two of sp's.
func spreadCounts(pod *corev1.Pod, nodes []*corev1.Node, units []*unit, j *judge, sp *spreadRule, affinity nodeaffinity.RequiredNodeAffinity, limit int64) ([]int64, bool) {
	// The domains and their matching Pods, counted on the eligible nodes
	// as the plugin's PreFilter counts them.
	type domain struct {
		have, room, want int64
		units            []int
	}
	domains := map[string]*domain{}
	var order []string
	for _, ni := range j.nodes {
		node := ni.Node()
		v, ok := node.Labels[sp.key]
		if !ok {
			continue
		}
		if sp.affinityHonor {
			if match, _ := affinity.Match(node); !match {
				continue
			}
		}
		if sp.taintsHonor {
			if _, bad := corev1helpers.FindMatchingUntoleratedTaint(logr.Discard(), node.Spec.Taints, pod.Spec.Tolerations, noSchedule, j.fts.EnableTaintTolerationComparisonOperators); bad {
				continue
			}
		}
		d := domains[v]
		if d == nil {
			d = &domain{}
			domains[v] = d
			order = append(order, v)
		}
		for _, p := range ni.GetPods() {
			q := p.GetPod()
			if q.DeletionTimestamp == nil && q.Namespace == pod.Namespace && sp.selector.Matches(labels.Set(q.Labels)) {
				d.have++
			}
		}
	}
	for k, u := range units {
		v := nodes[u.nodes[0]].Labels[sp.key]
		for _, i := range u.nodes[1:] {
			if nodes[i].Labels[sp.key] != v {
				return nil, false
			}
		}
		d := domains[v]
		if d == nil {
			// A feasible node passes the inclusion policies: its
			// domain is counted. Not so: no count.
			return nil, false
		}
		d.units = append(d.units, k)
		d.room, _ = satAdd(d.room, u.capacity())
	}
	least := int64(-1)
	for _, v := range order {
		d := domains[v]
		full, _ := satAdd(d.have, d.room)
		if least < 0 || full < least {
			least = full
		}
	}
	if int64(len(order)) < sp.minDomains {
		least = 0
	}
	bound, _ := satAdd(least, sp.maxSkew)
	var total int64
	for _, v := range order {
		d := domains[v]
		full, _ := satAdd(d.have, d.room)
		d.want = max(d.have, min(full, bound)) - d.have
		total, _ = satAdd(total, d.want)
	}
	if total > limit {
		// Fewer than the domains take: the least full first, as a
		// placing that stops at the limit has them.
		wants := make([]int64, len(order))
		haves := make([]int64, len(order))
		for k, v := range order {
			wants[k], haves[k] = domains[v].want, domains[v].have
		}
		got := levelFill(haves, wants, limit)
		for k, v := range order {
			domains[v].want = got[k]
		}
	}
	perUnit := make([]int64, len(units))
	for _, v := range order {
		d := domains[v]
		caps := make([]int64, len(d.units))
		for m, k := range d.units {
			caps[m] = units[k].capacity()
		}
		for m, n := range evenFill(caps, d.want) {
			perUnit[d.units[m]] = n
		}
	}
	return perUnit, true
}

// evenFill shares n among slots of capacity caps one round at a time,
// as a placing that takes the nodes in turn does: the least level L with
// every slot at min(cap, L) or L+1, the first ones (in order) at L+1.
func evenFill(caps []int64, n int64) []int64 {
	var total int64
	for _, c := range caps {
		total, _ = satAdd(total, c)
	}
	if n >= total {
		return slices.Clone(caps)
	}
	// levelFill from nothing: every slot at min(cap, L), the first of
	// those below their cap at L+1.
	return levelFill(make([]int64, len(caps)), caps, n)
}

// levelFill raises counts from have by at most want each, n in all, the
// least count first: the largest level L with every count at
// max(have, min(have + want, L)) within n, then the first of those at L
// one more.
func levelFill(have, want []int64, n int64) []int64 {
	out := make([]int64, len(have))
	at := func(l int64) int64 {
		var s int64
		for k := range have {
			top, _ := satAdd(have[k], want[k])
			s, _ = satAdd(s, max(have[k], min(top, l))-have[k])
		}
		return s
	}
	var lo, hi int64
	for k := range have {
		top, _ := satAdd(have[k], want[k])
		hi = max(hi, top)
	}
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if at(mid) <= n {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	left := n - at(lo)
	for k := range have {
		top, _ := satAdd(have[k], want[k])
		out[k] = max(have[k], min(top, lo)) - have[k]
		if left > 0 && top > lo && have[k] <= lo {
			out[k]++
			left--
		}
	}
	return out
}
