package kubernetes

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// Pods nominated to a node: while preemption evicts lower-priority Pods
// to make room for a Pending Pod, kube-scheduler writes the node into the
// Pod's status.nominatedNodeName and, until it binds, treats it as running
// there for every Pod of no higher priority that it fits on that node
// (its framework's addGENominatedPods: the nominated Pods of equal or
// higher priority join the node's NodeInfo and the plugins' state before
// the filters run). The fit does the same, from a fourth watch of only
// such Pods (docs/configuration.md: "Scheduling: schedule"): a proxy does
// not fit in the room a preemption is clearing for another Pod.

// nominatedPods is that watch's field selector: not bound, nominated to a
// node, not terminal. The API server selects on status.nominatedNodeName
// (the Pod's selectable fields), so only the few Pods a preemption is
// placing are sent, never the Pending ones.
var nominatedPods = "spec.nodeName=,status.nominatedNodeName!=," + nonTerminalPods

// nominatedAnnotation marks the nominated watch's copy of a Pod: stripped
// as a bound Pod is (keepPod), with its nominated node as its node, so the
// fit reads it as it reads a bound one, and its priority kept.
const nominatedAnnotation = "provider-health-exporter.internal/nominated"

// keepNominated is what the nominated watch stores of p: keepPod's copy
// of p as if bound to its nominated node (a stub over the bounds makes
// that node "not judged", as a bound one's does), with its priority; a
// Pod that is not nominated (a server that ignores the selector) is kept
// as its name only, and counts nowhere.
func keepNominated(p *corev1.Pod) *corev1.Pod {
	if _, ok := p.Annotations[nominatedAnnotation]; ok {
		// The transform may run twice on one object.
		return p
	}
	node := p.Status.NominatedNodeName
	if node == "" || p.Spec.NodeName != "" {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion}}
	}
	as := *p
	as.Spec.NodeName = node
	out := keepPod(&as)
	ann := make(map[string]string, len(out.Annotations)+1)
	for k, v := range out.Annotations {
		ann[k] = v
	}
	ann[nominatedAnnotation] = ""
	out.Annotations = ann
	out.Status.NominatedNodeName = node
	if p.Spec.Priority != nil {
		prio := *p.Spec.Priority
		out.Spec.Priority = &prio
	}
	return out
}

// nominatedList is the nominated watch's Pods that count: those kept as
// nominated (keepNominated), in the store's order.
func (ws *watchSet) nominatedList() []*corev1.Pod {
	if ws.nominated == nil || ws.nominated.informer == nil {
		return nil
	}
	var out []*corev1.Pod
	for _, o := range ws.nominated.informer.GetStore().List() {
		if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			if _, nominated := p.Annotations[nominatedAnnotation]; nominated {
				out = append(out, p)
			}
		}
	}
	return out
}

// addNominated adds the nominated Pods of no lower priority than the
// fitted Pod to their nodes' NodeInfos and to the state of the plugins
// that follow Pods added (InterPodAffinity), as the scheduler's
// addGENominatedPods does, and computes PodTopologySpread's state anew.
// It runs after the PreFilters and before the copies are counted; the
// NodeInfos are saved first (copy-on-write) and restored when the fit's
// snapshot is released. A Pod nominated to a node the cache does not
// hold adds nothing.
func (j *judge) addNominated(pods []*corev1.Pod) error {
	prio := corev1helpers.PodPriority(j.pod)
	added := false
	for _, p := range pods {
		if corev1helpers.PodPriority(p) < prio || p.UID == j.pod.UID {
			continue
		}
		ni, err := j.snap.NodeInfos().Get(p.Spec.NodeName)
		if err != nil {
			continue
		}
		pi, err := framework.NewPodInfo(p)
		if err != nil {
			return fmt.Errorf("scheduler plugins: nominated pod %s/%s: %w", boundedText(p.Namespace), boundedText(p.Name), err)
		}
		concrete, ok := ni.(*framework.NodeInfo)
		if !ok {
			return fmt.Errorf("scheduler snapshot: node %s is a %T", boundedText(p.Spec.NodeName), ni)
		}
		j.fs.save(concrete)
		concrete.AddPodInfo(pi)
		for _, e := range j.ext {
			if st := e.AddPod(j.ctx, j.state, j.pod, pi, ni); !st.IsSuccess() {
				return fmt.Errorf("scheduler plugins: %s", statusCause(st))
			}
		}
		added = true
	}
	if !added {
		return nil
	}
	return j.respread()
}
