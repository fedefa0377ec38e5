package kubernetes

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// Capacity per failure domain (docs/configuration.md: "Capacity per
// failure domain: capacity_domain"). The domains are the values of the
// entry's Node label key; a Node without the label is in none. Each
// domain's figures come from the entry's own fit snapshot (fitSnapshot),
// after its fit, with no request: the snapshot is restored between the
// fits below, each the fit of the entry (fitOn) on another view of it.
//
//   - Capacity: the fit of the Pod pinned to the domain, as if it had a
//     required node affinity "key In [value]" (pinPod). That is what the
//     scheduler binds of copies pinned so: PodTopologySpread's default
//     nodeAffinityPolicy Honor then leaves the other domains out of its
//     skew.
//   - Proxies: the bound Pods of the entry's namespace whose labels hold
//     every label of the Pod, with its values, on the domain's Nodes.
//   - AfterLoss: the domain lost as a zone outage looks to the scheduler:
//     its Nodes carry the node lifecycle controller's unreachable taints
//     and hold no Pod any more (loseDomain), then the fit of the Pod on
//     the whole cluster, less the domain's proxies, which must find a
//     place first. Under DoNotSchedule with nodeTaintsPolicy Ignore (the
//     default) the lost Nodes still count as a domain, at zero: the
//     others take only maxSkew more.

// unreachableTaints are the taints the node lifecycle controller puts on a
// Node whose kubelet stopped reporting. A Pod's default tolerations (the
// DefaultTolerationSeconds admission plugin) tolerate only the NoExecute
// one, for 300 s: the NoSchedule one keeps new Pods off.
var unreachableTaints = []corev1.Taint{
	{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute},
}

// domainFit is what fitDomains gives: the domains in name order, and the
// note the entry's message carries ("" none): the worst loss, or why no
// domain has figures.
type domainFit struct {
	domains []provider.Domain
	note    string
}

// fitDomains computes the figures of every value of the Node label key on
// the nodes of fs (nodes, in its order; use their bound Pods' requests),
// the Pod's proxies counted in namespace, after the entry's fit on fs,
// which kept its InterPodAffinity state in reuse (fitOptions.keepIPA;
// nil: the fits run every PreFilter). An error is the fits': the
// deadline cut one (fitCut) or the snapshot failed, and no figure holds.
func fitDomains(ctx context.Context, pod *corev1.Pod, fs *fitSnapshot, nodes []*corev1.Node, use map[string]*nodeUse,
	namespaces []*corev1.Namespace, key, namespace string, reuse *ipaReuse) (domainFit, error) {
	members := map[string][]int{}
	for i, n := range nodes {
		if v, ok := n.Labels[key]; ok {
			members[v] = append(members[v], i)
		}
	}
	names := slices.Sorted(maps.Keys(members))
	switch {
	case len(names) == 0:
		return domainFit{note: fmt.Sprintf("capacity_domain %s: no Node has the label, no domain", key)}, nil
	case len(names) > provider.MaxDomains:
		// Bounded series: a hostname label named by mistake must not
		// become a thousand series per entry.
		return domainFit{note: fmt.Sprintf("capacity_domain %s: %d domains, more than the %d an entry exports: no domain figures",
			key, len(names), provider.MaxDomains)}, nil
	}
	defer fs.restore()
	out := make([]provider.Domain, len(names))
	for k, v := range names {
		d := &out[k]
		d.Name = v
		// Each fit starts from the cluster cache's state: the copies the
		// last one placed are not proxies.
		fs.restore()
		proxies, err := domainProxies(fs, nodes, members[v], pod.Labels, namespace)
		if err != nil {
			return domainFit{}, err
		}
		d.Proxies = proxies
		r, err := fitOnWith(ctx, pinPod(pod, key, v), fs, nodes, nil, use, namespaces, provider.MaxCapacity,
			fitOptions{countOnly: true, ipa: reuse})
		if err != nil {
			return domainFit{}, fmt.Errorf("domain %s=%s: %w", key, v, err)
		}
		d.Capacity = min(r.Copies, provider.MaxCapacity)
		fs.restore()
		lostReuse, err := removeDomainPods(ctx, pod, reuse, fs, nodes, members[v])
		if err != nil {
			return domainFit{}, err
		}
		lostNodes, lostUse, err := loseDomain(fs, nodes, use, members[v])
		if err != nil {
			return domainFit{}, err
		}
		r, err = fitOnWith(ctx, pod, fs, lostNodes, nil, lostUse, namespaces, provider.MaxCapacity,
			fitOptions{countOnly: true, ipa: lostReuse})
		if err != nil {
			return domainFit{}, fmt.Errorf("the loss of domain %s=%s: %w", key, v, err)
		}
		d.AfterLoss, d.HasAfterLoss = min(r.Copies, provider.MaxCapacity)-d.Proxies, true
	}
	return domainFit{domains: out, note: provider.WorstLoss(out)}, nil
}

// domainProxies counts the proxies on the domain's nodes (indexes in
// nodes): the bound Pods of namespace whose labels hold every label of
// want with its value.
func domainProxies(fs *fitSnapshot, nodes []*corev1.Node, member []int, want map[string]string, namespace string) (int64, error) {
	var n int64
	for _, i := range member {
		ni, err := fs.snap.NodeInfos().Get(nodes[i].Name)
		if err != nil {
			return 0, fmt.Errorf("scheduler snapshot: %w", err)
		}
		for _, pi := range ni.GetPods() {
			p := pi.GetPod()
			if p.Namespace == namespace && hasLabels(p.Labels, want) {
				n++
			}
		}
	}
	return n, nil
}

// hasLabels says whether have holds every label of want, with its value.
func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// pinPod is a copy of pod that only the domain's Nodes take: its required
// node affinity with "key In [value]" added to each of its terms (they
// are ORed), or that one term when it has none. A Pod whose required
// affinity has no term matches no node, and still matches none.
func pinPod(pod *corev1.Pod, key, value string) *corev1.Pod {
	p := pod.DeepCopy()
	req := corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: []string{value}}
	if p.Spec.Affinity == nil {
		p.Spec.Affinity = &corev1.Affinity{}
	}
	if p.Spec.Affinity.NodeAffinity == nil {
		p.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := p.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{}}}
	}
	terms := na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	for t := range terms {
		terms[t].MatchExpressions = append(terms[t].MatchExpressions, req)
	}
	return p
}

// removeDomainPods is reuse without the Pods bound to the domain's nodes
// (indexes in nodes), as InterPodAffinity's RemovePod takes them out of its
// state: what its PreFilter would count once they are gone. Called before
// loseDomain empties the nodes.
func removeDomainPods(ctx context.Context, pod *corev1.Pod, reuse *ipaReuse, fs *fitSnapshot, nodes []*corev1.Node, member []int) (*ipaReuse, error) {
	if reuse == nil || reuse.state == nil || reuse.ext == nil {
		// Skipped before the loss: no Pod was counted, none is removed.
		return reuse, nil
	}
	cs := framework.NewCycleState()
	cs.Write(ipaStateKey, reuse.state.Clone())
	for _, i := range member {
		ni, err := fs.snap.NodeInfos().Get(nodes[i].Name)
		if err != nil {
			return nil, fmt.Errorf("scheduler snapshot: %w", err)
		}
		for _, pi := range ni.GetPods() {
			if st := reuse.ext.RemovePod(ctx, cs, pod, pi, ni); !st.IsSuccess() {
				return nil, fmt.Errorf("scheduler plugin InterPodAffinity: %s", statusCause(st))
			}
		}
	}
	st, err := cs.Read(ipaStateKey)
	if err != nil {
		return nil, fmt.Errorf("scheduler plugin InterPodAffinity: %w", err)
	}
	return &ipaReuse{state: st, ext: reuse.ext}, nil
}

// loseDomain makes the domain's nodes (indexes in nodes) lost in the
// snapshot, each NodeInfo saved first (restore puts it back): the Node
// with the unreachable taints, and no Pod bound to it. It returns the
// nodes and their use as the fit reads them then.
func loseDomain(fs *fitSnapshot, nodes []*corev1.Node, use map[string]*nodeUse, member []int) ([]*corev1.Node, map[string]*nodeUse, error) {
	lostNodes := slices.Clone(nodes)
	lostUse := maps.Clone(use)
	for _, i := range member {
		// A shallow copy with taints of its own: nothing else of the
		// Node is changed.
		node := *nodes[i]
		tainted := &node
		tainted.Spec.Taints = slices.Clone(tainted.Spec.Taints)
		for _, t := range unreachableTaints {
			if !slices.ContainsFunc(tainted.Spec.Taints, func(have corev1.Taint) bool { return have.MatchTaint(&t) }) {
				tainted.Spec.Taints = append(tainted.Spec.Taints, t)
			}
		}
		lostNodes[i] = tainted
		delete(lostUse, tainted.Name)
		ni, err := fs.snap.NodeInfos().Get(tainted.Name)
		if err != nil {
			return nil, nil, fmt.Errorf("scheduler snapshot: %w", err)
		}
		concrete, ok := ni.(*framework.NodeInfo)
		if !ok {
			return nil, nil, fmt.Errorf("scheduler snapshot: node %s is a %T", tainted.Name, ni)
		}
		empty := framework.NewNodeInfo()
		empty.SetNode(tainted)
		fs.replace(concrete, empty)
	}
	return lostNodes, lostUse, nil
}
