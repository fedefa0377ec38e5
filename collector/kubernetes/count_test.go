package kubernetes

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"
)

// randomCluster is a small cluster of the oracle's shapes: nodes of 1 to
// 3 CPUs and few pod slots in up to four zones (some without a zone
// label), some tainted or cordoned; bound Pods of the proxy (in its
// namespace and in another), Pods holding the host port, and Pods whose
// anti-affinity repels the proxy.
func randomCluster(rng *rand.Rand) ([]*corev1.Node, []*corev1.Pod) {
	n := 2 + rng.IntN(7)
	zones := 1 + rng.IntN(4)
	var nodes []*corev1.Node
	for i := range n {
		name := fmt.Sprintf("n%d", i)
		cpu := fmt.Sprintf("%dm", 500*(1+rng.IntN(6)))
		pods := fmt.Sprint(1 + rng.IntN(8))
		nodes = append(nodes, fitNode(name, func(node *corev1.Node) {
			if rng.IntN(8) > 0 {
				node.Labels[corev1.LabelTopologyZone] = fmt.Sprintf("z%d", rng.IntN(zones))
			}
			switch rng.IntN(8) {
			case 0:
				node.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "batch", Effect: corev1.TaintEffectNoSchedule}}
			case 1:
				node.Spec.Unschedulable = true
			}
		}, "cpu", cpu, "memory", "8Gi", "pods", pods))
	}
	var pods []*corev1.Pod
	for k := range rng.IntN(2 * n) {
		p := boundPod(nodes[rng.IntN(n)].Name, "cpu", "250m")
		p.Name = fmt.Sprintf("bound-%d", k)
		switch rng.IntN(5) {
		case 0:
			p.Labels = map[string]string{"app": "proxy"}
		case 1:
			p.Labels = map[string]string{"app": "proxy"}
			p.Namespace = "elsewhere"
		case 2:
			p.Labels = map[string]string{"app": "other"}
			hostPort(p)
		case 3:
			p.Labels = map[string]string{"app": "guard"}
			key := corev1.LabelHostname
			if rng.IntN(2) == 0 {
				key = corev1.LabelTopologyZone
			}
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "proxy"}}, TopologyKey: key}}}}
		default:
			p.Labels = map[string]string{"app": "web"}
		}
		pods = append(pods, stripPod(p))
	}
	return nodes, pods
}

// randomProxy is a proxy Pod (500m) with a random mix of the shapes that
// make copies constrain each other.
func randomProxy(rng *rand.Rand) *corev1.Pod {
	return proxyPod(func(p *corev1.Pod) {
		if rng.IntN(3) == 0 {
			hostPort(p)
		}
		switch rng.IntN(4) {
		case 0:
			antiAffinity(corev1.LabelHostname)(p)
		case 1:
			antiAffinity(corev1.LabelTopologyZone)(p)
		}
		if rng.IntN(4) == 0 {
			p.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}
		}
		if rng.IntN(6) == 0 {
			p.Spec.NodeSelector = map[string]string{corev1.LabelTopologyZone: "z0"}
		}
		if rng.IntN(3) == 0 {
			return
		}
		c := corev1.TopologySpreadConstraint{MaxSkew: int32(1 + rng.IntN(3)), TopologyKey: corev1.LabelTopologyZone,
			WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "proxy"}}}
		if rng.IntN(6) == 0 {
			c.TopologyKey = corev1.LabelHostname
		}
		if rng.IntN(3) == 0 {
			c.MinDomains = new(int32(1 + rng.IntN(5)))
		}
		switch rng.IntN(3) {
		case 0:
			c.NodeTaintsPolicy = new(corev1.NodeInclusionPolicyHonor)
		case 1:
			c.NodeTaintsPolicy = new(corev1.NodeInclusionPolicyIgnore)
		}
		if rng.IntN(4) == 0 {
			c.NodeAffinityPolicy = new(corev1.NodeInclusionPolicyIgnore)
		}
		if rng.IntN(8) == 0 {
			// A selector the copies do not match: it never changes.
			c.LabelSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
		}
		p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, c)
	})
}

// placeOneByOne is the fit with every copy placed one after another
// (simulate), the reference the count must equal.
func placeOneByOne(t *testing.T, pod *corev1.Pod, nodes []*corev1.Node, pods []*corev1.Pod, limit int64) (FitResult, []int64) {
	t.Helper()
	j, err := newJudge(context.Background(), pod, nil, nodes, pods, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	r, err := simulate(pod, nodes, nodeUsage(pods), j, limit)
	if err != nil {
		t.Fatal(err)
	}
	return r, perNode(t, j, nodes)
}

// counted is the fit through fitCopies, and whether it counted.
func counted(t *testing.T, pod *corev1.Pod, nodes []*corev1.Node, pods []*corev1.Pod, limit int64) (FitResult, []int64, bool) {
	t.Helper()
	j, err := newJudge(context.Background(), pod, nil, nodes, pods, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	sh, ok, err := shapeOf(pod, j)
	if err != nil || !ok {
		return FitResult{}, nil, false
	}
	r, ok, err := countCopies(pod, nodes, nodeUsage(pods), j, sh, limit)
	if err != nil {
		t.Fatal(err)
	}
	return r, perNode(t, j, nodes), ok
}

// perNode is the copies the judge's snapshot holds on each node.
func perNode(t *testing.T, j *judge, nodes []*corev1.Node) []int64 {
	t.Helper()
	out := make([]int64, len(nodes))
	for i, n := range nodes {
		ni, err := j.snap.NodeInfos().Get(n.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ni.GetPods() {
			if p == j.copyInfo {
				out[i]++
			}
		}
	}
	return out
}

// perZone sums per-node copies by zone label ("" for none).
func perZone(nodes []*corev1.Node, per []int64) map[string]int64 {
	out := map[string]int64{}
	for i, n := range nodes {
		if per[i] > 0 {
			out[n.Labels[corev1.LabelTopologyZone]] += per[i]
		}
	}
	return out
}

// TestCountEqualsPlacing: on thousands of random small clusters of the
// oracle's shapes (host ports, anti-affinity per node and per zone, zone
// and node spread with and without minDomains, taints under both
// nodeTaintsPolicy values, and their mixes) the count equals placing the
// copies one by one: the same copies, the same copies per zone, and when
// no bound stopped it, the same nodes taking copies and the same causes
// for the others. The cases the count does not handle are placed one by
// one in fitCopies; enough are counted here that the test means something.
func TestCountEqualsPlacing(t *testing.T) {
	t.Parallel()
	var rng *rand.Rand
	var n, spread, bounded int
	for c := range 2400 {
		// Four fixed seeds, 600 clusters each.
		if c%600 == 0 {
			rng = rand.New(rand.NewPCG(52, uint64(c/600)))
		}
		nodes, pods := randomCluster(rng)
		pod := randomProxy(rng)
		limit := int64(1000)
		if rng.IntN(3) == 0 {
			limit = int64(1 + rng.IntN(6))
		}
		want, wantPer := placeOneByOne(t, pod, nodes, pods, limit)
		nodes2, pods2 := copyCluster(nodes, pods)
		got, gotPer, ok := counted(t, pod, nodes2, pods2, limit)
		if !ok {
			continue
		}
		n++
		if len(pod.Spec.TopologySpreadConstraints) > 0 {
			spread++
		}
		if want.Bounded {
			bounded++
		}
		describe := func() string {
			return fmt.Sprintf("case %d: limit %d, pod %+v %+v %+v, nodes %s, pods %s", c, limit, pod.Spec.Containers[0].Ports, pod.Spec.Affinity, pod.Spec.TopologySpreadConstraints, describeNodes(nodes), describePods(pods))
		}
		if got.Copies != want.Copies || got.Bounded != want.Bounded {
			t.Fatalf("%s:\ncounted %d copies (bounded %v), placed %d (bounded %v)\ncounted %s\nplaced  %s", describe(), got.Copies, got.Bounded, want.Copies, want.Bounded, got.Message(), want.Message())
		}
		if want.Bounded {
			continue
		}
		if !reflect.DeepEqual(perZone(nodes, gotPer), perZone(nodes, wantPer)) {
			t.Fatalf("%s:\ncopies per zone counted %v, placed %v", describe(), perZone(nodes, gotPer), perZone(nodes, wantPer))
		}
		for _, c := range pod.Spec.TopologySpreadConstraints {
			if c.TopologyKey == corev1.LabelHostname && !reflect.DeepEqual(gotPer, wantPer) {
				t.Fatalf("%s:\ncopies per node counted %v, placed %v", describe(), gotPer, wantPer)
			}
		}
		// Which nodes of a zone take its copies depends on the order of
		// the placing where a spread constraint lets a zone take fewer
		// than its nodes would (a few clusters in thousands): the count spreads
		// them over the zone's nodes, the placing may not. Elsewhere the
		// whole result is the same.
		if len(pod.Spec.TopologySpreadConstraints) == 0 && !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\ncounted %s\nplaced  %s", describe(), got.Message(), want.Message())
		}
	}
	t.Logf("%d of 2,400 clusters counted (%d with a spread constraint, %d stopped by the limit)", n, spread, bounded)
	if n < 2000 || spread < 1000 || bounded < 150 {
		t.Errorf("only %d counted, %d with spread, %d bounded: the generator no longer makes the shapes the count handles", n, spread, bounded)
	}
}

func copyCluster(nodes []*corev1.Node, pods []*corev1.Pod) ([]*corev1.Node, []*corev1.Pod) {
	n2 := make([]*corev1.Node, len(nodes))
	for i, n := range nodes {
		n2[i] = n.DeepCopy()
	}
	p2 := make([]*corev1.Pod, len(pods))
	for i, p := range pods {
		p2[i] = p.DeepCopy()
	}
	return n2, p2
}

func describeNodes(nodes []*corev1.Node) string {
	s := ""
	for _, n := range nodes {
		s += fmt.Sprintf("[%s %s cpu %s pods %s taints %d cordon %v] ", n.Name, n.Labels[corev1.LabelTopologyZone],
			n.Status.Allocatable.Cpu(), n.Status.Allocatable.Pods(), len(n.Spec.Taints), n.Spec.Unschedulable)
	}
	return s
}

func describePods(pods []*corev1.Pod) string {
	s := ""
	for _, p := range pods {
		s += fmt.Sprintf("[%s/%s on %s %v ports %v anti %v] ", p.Namespace, p.Name, p.Spec.NodeName, p.Labels,
			len(schedutil.GetHostPorts(p)) > 0, p.Spec.Affinity != nil)
	}
	return s
}
