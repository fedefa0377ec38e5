package kubernetes

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresource "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/egress-proxies/provider_health_exporter/provider"
)

// ReasonUnschedulable says no node takes the Pod that the pod_template's
// dry run returned, judged as kube-scheduler's filters would
// (docs/metrics.md: "Reasons"). The API server answered, so up = 1.
const ReasonUnschedulable provider.Reason = "Unschedulable"

// The causes a node does not take the Pod, in kube-scheduler's words
// (its plugins nodeunschedulable, tainttoleration, nodeaffinity and
// noderesources), so that the message reads as the Pod's
// FailedScheduling event would.
const (
	causeUnschedulable = "node(s) were unschedulable"
	causeAffinity      = "node(s) didn't match Pod's node affinity/selector"
	causeTooManyPods   = "Too many pods"
)

// maxCauses bounds the distinct causes a message names (each untolerated
// taint is a cause of its own); the rest are counted.
const maxCauses = 8

// nodeNeed is what one copy of the Pod asks of a node, as the scheduler's
// NodeResourcesFit counts it: cpu in millicores, the others in units.
// What it adds to a quota, limits included, is quotaNeeds (capacity.go).
// It is made for every cached Pod at every scrape, so it stays these few
// integers.
type nodeNeed struct {
	milliCPU, memory, ephemeral int64
	scalar                      map[corev1.ResourceName]int64
	// uncounted is a resource whose request is beyond what int64 holds
	// (counted as math.MaxInt64: bounds_fit.go).
	uncounted corev1.ResourceName
}

// needOf is the Pod's need: component-helpers' PodRequests is the
// function kube-scheduler itself calls (noderesources.computePodResourceRequest):
// the larger of the containers' sum and each init container's
// (restartable ones, sidecars, added), plus pod overhead and pod-level
// resources.
func needOf(pod *corev1.Pod) nodeNeed {
	return needOfList(podresource.PodRequests(pod, podresource.PodResourcesOptions{}))
}

func needOfList(reqs corev1.ResourceList) nodeNeed {
	var n nodeNeed
	for name, q := range reqs {
		// Saturated, never wrapped; a negative request, which no API
		// server admits, frees nothing.
		var v int64
		var sat bool
		if name == corev1.ResourceCPU {
			v, sat = satMilli(q)
		} else {
			v, sat = satValue(q)
		}
		v = max(v, 0)
		if sat && n.uncounted == "" {
			n.uncounted = name
		}
		switch name {
		case corev1.ResourceCPU:
			n.milliCPU = v
		case corev1.ResourceMemory:
			n.memory = v
		case corev1.ResourceEphemeralStorage:
			n.ephemeral = v
		default:
			if scalarResource(name) {
				if n.scalar == nil {
					n.scalar = map[corev1.ResourceName]int64{}
				}
				n.scalar[name] = v
			}
		}
	}
	return n
}

// scalarResource is the scheduler's IsScalarResourceName (extended
// resources, hugepages, kubernetes.io/-prefixed native resources,
// attachable volumes), written here because it lives in
// k8s.io/kubernetes, which is not a library: every other name in a
// Pod's requests is not checked against nodes.
func scalarResource(name corev1.ResourceName) bool {
	s := string(name)
	return strings.Contains(s, "/") && !strings.HasPrefix(s, corev1.DefaultResourceRequestsPrefix) ||
		strings.HasPrefix(s, corev1.ResourceHugePagesPrefix) ||
		strings.HasPrefix(s, corev1.ResourceAttachableVolumesPrefix)
}

// nodeUse is what the Pods bound to a node request of it.
type nodeUse struct {
	pods int64
	nodeNeed
	// unreadable names a bound Pod with a quantity that could not be read,
	// overBound one whose labels or terms are over the watch's bounds
	// (bounds_pod.go), uncounted a request that could not be counted
	// (bounds_fit.go).
	unreadable, overBound, uncounted string
}

// add adds n to the sums, saturating: the resource whose sum reached
// math.MaxInt64 is returned.
func (u *nodeUse) add(n nodeNeed) corev1.ResourceName {
	u.pods++
	over := n.uncounted
	sum := func(name corev1.ResourceName, to *int64, v int64) {
		var sat bool
		if *to, sat = satAdd(*to, v); sat && over == "" {
			over = name
		}
	}
	sum(corev1.ResourceCPU, &u.milliCPU, n.milliCPU)
	sum(corev1.ResourceMemory, &u.memory, n.memory)
	sum(corev1.ResourceEphemeralStorage, &u.ephemeral, n.ephemeral)
	for k, v := range n.scalar {
		if u.scalar == nil {
			u.scalar = map[corev1.ResourceName]int64{}
		}
		s := u.scalar[k]
		sum(k, &s, v)
		u.scalar[k] = s
	}
	return over
}

// nodeUsage sums the requests of the Pods bound to each node. The Pods are
// the watch cache's, already stripped to one container holding their
// requests (stripPod), and non-terminal (the watch's field selector, as
// the scheduler's own informer has it).
func nodeUsage(pods []*corev1.Pod) map[string]*nodeUse {
	use := map[string]*nodeUse{}
	for _, p := range pods {
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		u := use[p.Spec.NodeName]
		if u == nil {
			u = &nodeUse{}
			use[p.Spec.NodeName] = u
		}
		u.addPod(p)
	}
	return use
}

// addPod counts the bound Pod p on its node's sums.
func (u *nodeUse) addPod(p *corev1.Pod) {
	if why, ok := p.Annotations[unreadableAnnotation]; ok && u.unreadable == "" {
		u.unreadable = boundedText(p.Namespace) + "/" + boundedText(p.Name) + ": " + why
	}
	if why, ok := p.Annotations[overBoundAnnotation]; ok && u.overBound == "" {
		u.overBound = boundedText(p.Namespace) + "/" + boundedText(p.Name) + ": " + why
	}
	if over := u.add(strippedNeed(p)); over != "" && u.uncounted == "" {
		u.uncounted = noteUncounted(p, over)
	}
}

// strippedNeed is needOf for a Pod of the watch cache, whose one
// container holds its requests as the scheduler sums them (stripPod):
// read directly, without PodRequests' maps, since a scrape reads every
// cached Pod (docs/scaling.md).
func strippedNeed(p *corev1.Pod) nodeNeed {
	if len(p.Spec.Containers) != 1 || len(p.Spec.InitContainers) > 0 || p.Spec.Overhead != nil || p.Spec.Resources != nil {
		return needOf(p)
	}
	return needOfList(p.Spec.Containers[0].Resources.Requests)
}

// FitResult is how many copies of the Pod the cluster's nodes take.
type FitResult struct {
	// Nodes is the number of nodes, Fitting those that take a copy or
	// more, Copies the sum of the copies each takes.
	Nodes, Fitting int
	Copies         int64
	// Causes counts the nodes that take none by the scheduler's words
	// ("Insufficient cpu"): a node short of two resources counts under
	// both, as in the scheduler's message.
	Causes map[string]int
	// Bounded says the placing of copies stopped at the quota's capacity
	// or its own bound (simulate.go): at least Copies fit.
	Bounded bool
}

// fit judges the Pod on every node as kube-scheduler's filters do, in
// their order (NodeUnschedulable, TaintToleration, NodeAffinity,
// NodeResourcesFit; the first that fails names the cause), and counts the
// copies each node takes: the least over its free pod slots and over each
// requested resource of floor(allocatable − requested) / request.
func fit(pod *corev1.Pod, nodes []*corev1.Node, use map[string]*nodeUse) FitResult {
	need := needOf(pod)
	// nodeaffinity is the scheduler's own matcher for nodeSelector and
	// requiredDuringSchedulingIgnoredDuringExecution terms (label and
	// metadata.name field selectors), with the API's semantics of empty
	// and invalid terms.
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	r := FitResult{Nodes: len(nodes), Causes: map[string]int{}}
	for _, node := range nodes {
		if cause := nodeCause(pod, node, affinity, use[node.Name]); cause != "" {
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
		r.Fitting++
		r.Copies, _ = satAdd(r.Copies, n)
	}
	return r
}

// nodeCause is why node takes no copy before its free resources are
// counted: a quantity of it or of its bound Pods that could not be read
// (bounds_watch.go), the first of the scheduler's node filters that
// refuses the Pod, or bound Pods' requests beyond what int64 counts.
// "" when none applies. fit, fitNodes and simulate all start with it.
func nodeCause(pod *corev1.Pod, node *corev1.Node, affinity nodeaffinity.RequiredNodeAffinity, u *nodeUse) string {
	if cause := causeUnreadable(node, u); cause != "" {
		return cause
	}
	if cause := filter(pod, node, affinity); cause != "" {
		return cause
	}
	return causeUncounted(u)
}

// noSchedule is the scheduler's taint filter: only taints that keep Pods
// off a node count (PreferNoSchedule only scores).
func noSchedule(t *corev1.Taint) bool {
	return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
}

// filter is the first of the scheduler's node filters that refuses the
// Pod, as its cause; "" when none does.
func filter(pod *corev1.Pod, node *corev1.Node, affinity nodeaffinity.RequiredNodeAffinity) string {
	// A cordoned node takes a Pod that tolerates its unschedulable taint,
	// as the scheduler's NodeUnschedulable plugin has it.
	if node.Spec.Unschedulable && !corev1helpers.TolerationsTolerateTaint(logr.Discard(), pod.Spec.Tolerations,
		&corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}, false) {
		return causeUnschedulable
	}
	// The toleration matching (operators, empty keys and effects) is the
	// scheduler's own; comparison operators are an alpha feature, off.
	if t, bad := corev1helpers.FindMatchingUntoleratedTaint(logr.Discard(), node.Spec.Taints, pod.Spec.Tolerations, noSchedule, false); bad {
		// The taint named, as kube-scheduler did before 1.27: it is what
		// an operator has to act on.
		return fmt.Sprintf("node(s) had untolerated taint {%s: %s}", t.Key, t.Value)
	}
	if ok, err := affinity.Match(node); err != nil || !ok {
		return causeAffinity
	}
	return ""
}

// copiesOn is how many copies of need fit on node besides what the Pods
// bound to it use (nil: none), and when none, the scheduler's causes.
func copiesOn(need nodeNeed, node *corev1.Node, u *nodeUse) (int64, []string) {
	if u == nil {
		u = &nodeUse{}
	}
	alloc := node.Status.Allocatable
	copies := quantityValue(alloc, corev1.ResourcePods) - u.pods
	var short []string
	if copies <= 0 {
		copies = 0
		short = append(short, causeTooManyPods)
	}
	limit := func(name string, req, free int64) {
		if req <= 0 {
			return
		}
		n := max(free, 0) / req
		if n == 0 {
			short = append(short, "Insufficient "+name)
		}
		copies = min(copies, n)
	}
	limit(string(corev1.ResourceCPU), need.milliCPU, milliValue(alloc, corev1.ResourceCPU)-u.milliCPU)
	limit(string(corev1.ResourceMemory), need.memory, quantityValue(alloc, corev1.ResourceMemory)-u.memory)
	limit(string(corev1.ResourceEphemeralStorage), need.ephemeral, quantityValue(alloc, corev1.ResourceEphemeralStorage)-u.ephemeral)
	for _, name := range slices.Sorted(maps.Keys(need.scalar)) {
		limit(string(name), need.scalar[name], quantityValue(alloc, name)-u.scalar[name])
	}
	return copies, short
}

func quantityValue(l corev1.ResourceList, name corev1.ResourceName) int64 {
	q, ok := l[name]
	if !ok {
		return 0
	}
	v, _ := satValue(q)
	return max(v, 0) // a negative allocatable is no room
}

func milliValue(l corev1.ResourceList, name corev1.ResourceName) int64 {
	q, ok := l[name]
	if !ok {
		return 0
	}
	v, _ := satMilli(q)
	return max(v, 0)
}

// Message says the result as kube-scheduler's FailedScheduling event
// does when no node takes the Pod ("0/5 nodes are available: 2
// Insufficient cpu, 1 node(s) were unschedulable"), and otherwise how
// many copies fit where, with the causes of the nodes that take none.
// The causes are sorted as the scheduler sorts them and bounded
// (maxCauses, provider.BoundString).
func (r FitResult) Message() string {
	causes := make([]string, 0, len(r.Causes))
	for c, n := range r.Causes {
		causes = append(causes, fmt.Sprintf("%d %s", n, c))
	}
	slices.Sort(causes)
	if len(causes) > maxCauses {
		causes = append(causes[:maxCauses], fmt.Sprintf("and %d more causes", len(causes)-maxCauses))
	}
	var msg string
	if r.Copies == 0 {
		msg = fmt.Sprintf("0/%d nodes are available", r.Nodes)
		if len(causes) > 0 {
			msg += ": " + strings.Join(causes, ", ")
		}
	} else {
		msg = fmt.Sprintf("%d copies of the Pod fit on %d/%d nodes", r.Copies, r.Fitting, r.Nodes)
		if r.Bounded {
			msg = fmt.Sprintf("at least %d copies of the Pod fit (placed on %d/%d nodes until the bound)", r.Copies, r.Fitting, r.Nodes)
		}
		if len(causes) > 0 {
			msg += "; the others take none: " + strings.Join(causes, ", ")
		}
	}
	return provider.BoundString(msg)
}

// stripPod is the watch cache's copy of a Pod: what the fit reads of it
// and the cache needs to key it (namespace, name, resourceVersion), and
// its requests, summed once here by the scheduler's rules into a single
// container. A 20,000-Pod cluster costs 20,000 of these, not 20,000 full
// Pods (docs/scaling.md).
func stripPod(p *corev1.Pod) *corev1.Pod {
	reqs := podresource.PodRequests(p, podresource.PodResourcesOptions{})
	for name, q := range reqs {
		if q.IsZero() {
			delete(reqs, name)
		}
	}
	out := &corev1.Pod{
		ObjectMeta: stripMeta(&p.ObjectMeta),
		Spec:       corev1.PodSpec{NodeName: p.Spec.NodeName},
		Status:     corev1.PodStatus{Phase: p.Status.Phase},
	}
	if len(reqs) > 0 {
		out.Spec.Containers = []corev1.Container{{Resources: corev1.ResourceRequirements{Requests: reqs}}}
	}
	keepSchedulingTerms(p, out)
	return out
}

// stripNode is the watch cache's copy of a Node: its name and labels (for
// node affinity), taints, cordon and allocatable; not its images,
// conditions, addresses or managed fields, which are most of its size.
func stripNode(n *corev1.Node) *corev1.Node {
	meta := stripMeta(&n.ObjectMeta)
	meta.Labels = n.Labels
	return &corev1.Node{
		ObjectMeta: meta,
		Spec:       corev1.NodeSpec{Unschedulable: n.Spec.Unschedulable, Taints: n.Spec.Taints},
		Status:     corev1.NodeStatus{Allocatable: n.Status.Allocatable},
	}
}

func stripMeta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	out := metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion}
	if why, ok := m.Annotations[unreadableAnnotation]; ok {
		// The stub of an object with a quantity that cannot be read.
		out.Annotations = map[string]string{unreadableAnnotation: why}
	}
	return out
}
