package kubernetes

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
)

// nominatedPod is a Pending Pod a preemption nominated to node, of the
// given priority, with keepNominated's copy as the nominated watch keeps it.
func nominatedPod(name, node string, priority int32, mut func(*corev1.Pod), req ...string) *corev1.Pod {
	p := fitPod(mut, req...)
	p.Name, p.UID, p.Namespace = name, ktypes.UID("uid-"+name), "other"
	p.Status.Phase, p.Status.NominatedNodeName = corev1.PodPending, node
	p.Spec.Priority = &priority
	return keepNominated(p)
}

// TestKeepNominated: the nominated watch keeps a nominated Pod as a bound
// one on its nominated node, with its priority; anything else as a name.
func TestKeepNominated(t *testing.T) {
	t.Parallel()
	kept := nominatedPod("preemptor", "a", 1000, nil, "cpu", "1")
	if kept.Spec.NodeName != "a" || kept.Spec.Priority == nil || *kept.Spec.Priority != 1000 || len(kept.Spec.Containers) != 1 {
		t.Fatalf("kept %+v, want it on node a with priority 1000 and its requests", kept)
	}
	if _, ok := kept.Annotations[nominatedAnnotation]; !ok {
		t.Fatalf("kept without the nominated mark: %v", kept.Annotations)
	}
	if again := keepNominated(kept); again != kept {
		t.Fatal("a second transform changed the kept copy")
	}
	pending := fitPod(nil, "cpu", "1")
	pending.Status.Phase = corev1.PodPending
	bound := boundPod("b", "cpu", "1")
	bound.Status.NominatedNodeName = "b"
	for name, p := range map[string]*corev1.Pod{"pending, not nominated": pending, "bound (a server ignoring the selector)": bound} {
		got := keepNominated(p)
		if got.Spec.NodeName != "" || len(got.Spec.Containers) != 0 || got.Name != p.Name {
			t.Errorf("%s: kept %+v, want its name only", name, got)
		}
	}
	if !strings.Contains(nominatedPods, "status.nominatedNodeName!=") || !strings.Contains(nominatedPods, "spec.nodeName=,") {
		t.Errorf("selector %q, want unbound and nominated Pods only", nominatedPods)
	}
}

// TestFitNominated: a Pod nominated to a node takes its room, its ports
// and its anti-affinity there from the fitted Pod when its priority is
// not lower, as the scheduler's addGENominatedPods has it; the fit's
// snapshot gives the node back when released.
func TestFitNominated(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	nodes := []*corev1.Node{fitNode("a", nil, "cpu", "2", "memory", "8Gi", "pods", "110"), fitNode("b", nil, "cpu", "2", "memory", "8Gi", "pods", "110")}
	cc := fedCache(ctx, nodes, nil)
	fitOn := func(pod *corev1.Pod, nominated ...*corev1.Pod) FitResult {
		t.Helper()
		res, err := fitOwnFit(cc, func(fs *fitSnapshot) (FitResult, error) {
			fs.nominated = nominated
			return fitWithPluginsOn(t.Context(), pod, fs, fs.nodes(), nil, nil, 1<<20)
		})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	proxy := fitPod(func(p *corev1.Pod) { p.Labels = map[string]string{"app": "proxy"} }, "cpu", "500m")
	if got := fitOn(proxy).Copies; got != 8 {
		t.Fatalf("no nominated Pod: %d copies, want 8", got)
	}
	// 1.5 CPUs nominated to a: 1 copy of 500m left there.
	big := nominatedPod("preemptor", "a", 0, nil, "cpu", "1500m")
	if got := fitOn(proxy, big).Copies; got != 5 {
		t.Fatalf("a Pod of 1.5 CPUs nominated to a: %d copies, want 1 + 4", got)
	}
	// A lower priority than the proxy's: the scheduler does not count it.
	low := nominatedPod("low", "a", -10, nil, "cpu", "1500m")
	if got := fitOn(proxy, low).Copies; got != 8 {
		t.Fatalf("a Pod of lower priority nominated to a: %d copies, want 8", got)
	}
	// Anti-affinity of the nominated Pod to the proxies: none on a. (Only
	// for a proxy with terms of its own: for one without, and no bound Pod
	// with anti-affinity, InterPodAffinity skips the Pod at PreFilter, and
	// the scheduler then adds no nominated Pod to that plugin's state
	// either.) One proxy per node: b takes the one copy left.
	perNode := proxyPod(antiAffinity(corev1.LabelHostname))
	if got := fitOn(perNode).Copies; got != 2 {
		t.Fatalf("one proxy per node, nothing nominated: %d copies, want 2", got)
	}
	anti := nominatedPod("anti", "a", 0, func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "proxy"}}, TopologyKey: corev1.LabelHostname,
			Namespaces: []string{"egress-proxies"}}}}}
	}, "cpu", "100m")
	res := fitOn(perNode, anti)
	if res.Copies != 1 || !strings.Contains(res.Message(), "anti-affinity") {
		t.Fatalf("a Pod nominated to a that repels proxies: %d copies (%s), want b's 1 and a refused by anti-affinity", res.Copies, res.Message())
	}
	// A nominated Pod on a node the cache does not hold adds nothing.
	if got := fitOn(proxy, nominatedPod("elsewhere", "gone", 0, nil, "cpu", "2")).Copies; got != 8 {
		t.Fatalf("a Pod nominated to an unknown node: %d copies, want 8", got)
	}
	// The snapshots kept give the nodes back, and were kept: nothing a
	// nominated Pod changed is left in them.
	if got := fitOn(proxy).Copies; got != 8 {
		t.Fatalf("after the nominated fits: %d copies, want 8", got)
	}
	cc.mu.Lock()
	idle := len(cc.idle)
	var held int
	for _, snap := range cc.idle {
		all, _ := snap.NodeInfos().List()
		for _, ni := range all {
			held += len(ni.GetPods())
		}
	}
	cc.mu.Unlock()
	if idle != 1 || held != 0 {
		t.Fatalf("after the fits %d snapshots kept holding %d Pods, want 1 holding none", idle, held)
	}
}

// TestFitNominatedSpread: nominated Pods that the fitted Pod's spread
// selects count in their zone, as the scheduler's PodTopologySpread
// counts them once they join the NodeInfo: two proxies nominated to zone
// z1 let z2 take two more than z1's copies.
func TestFitNominatedSpread(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	zone := func(z string) func(*corev1.Node) {
		return func(n *corev1.Node) { n.Labels[corev1.LabelTopologyZone] = z }
	}
	nodes := []*corev1.Node{fitNode("a", zone("z1"), "cpu", "4", "memory", "8Gi", "pods", "110"), fitNode("b", zone("z2"), "cpu", "4", "memory", "8Gi", "pods", "110")}
	cc := fedCache(ctx, nodes, nil)
	spread := proxyPod(zoneSpread(corev1.DoNotSchedule))
	labelled := func(p *corev1.Pod) { p.Labels = map[string]string{"app": "proxy"}; p.Namespace = "egress-proxies" }
	nominated := []*corev1.Pod{nominatedPod("p1", "a", 0, labelled, "cpu", "500m"), nominatedPod("p2", "a", 0, labelled, "cpu", "500m")}
	for i := range nominated {
		nominated[i].Namespace = "egress-proxies"
	}
	res, err := fitOwnFit(cc, func(fs *fitSnapshot) (FitResult, error) {
		fs.nominated = nominated
		return fitWithPluginsOn(t.Context(), spread, fs, fs.nodes(), nil, nil, 1<<20)
	})
	if err != nil {
		t.Fatal(err)
	}
	// a: 8 slots of 500m, 2 nominated: 6 copies; b: 8. Zones end at 8
	// and 8 proxies: skew 0. Without the nominated Pods in the spread's
	// counts, b would stop one above a's 6 copies: 13.
	if res.Copies != 14 {
		t.Fatalf("two proxies nominated to z1: %d copies (%s), want 6 + 8", res.Copies, res.Message())
	}
}
